"""`python -m engine tune`: time the lessons' models' matrix-product plans, and measure the
machine's two limits (memory bandwidth, matmul peak), as part of a machine's set-up, after
`build-kernel`. The app does the same at its first start, in its engine worker (the "setup"
job, engine.lab.jobs.setup); this command is for a machine set up before any reader comes.

A plan (engine/model/matmul_plan.py, weighed in the whole step by engine/model/step_plan.py) is
a fact about the machine (CPU, torch, threads, the C++ library's build) and a model's shapes,
like the kernels' build: timed on first use, it costs a reader's first engine tens of seconds
for small on a 2-core machine. Here each preset is timed the way the lab's worker will use it:
pinned to the engine's cores of the core split (engine/lab/cores.py, as for the server), with
one torch thread per core, so the plan lands under the key the worker reads. A plan already on
disk is not timed again, and its model is not built: whether it is there is read from the
model's shapes alone (its layers as made, no checkpoint read, no copies laid out), so a second
`tune` makes no weights.

The limits (engine.hardware.hardware_limits) are a fact about the machine too, read by every
page that draws a roofline (the `info` job). Measured during a class they are mostly disturbed
by the web server's work, so never kept, and measured again by each page that asks. Here they
are measured the way the worker measures them (pinned to its cores, inside the same
disturbance check) and kept when quiet; when not, `tune` says so (the worker measures them
when a page asks).
"""

from __future__ import annotations

import os
import sys
import time

import torch

from ..config import EngineConfig, get_preset
from ..device import configure_threads, resolve_device, torch_dtype
from ..hardware import hardware_limits, limits_on_disk
from ..lab import cores
from ..llm_engine import LLMEngine, default_backend
from ..model.layers import Linear
from ..model.matmul_plan import has_plan
from ..model.model import LlamaModel

# The presets the lessons run: the model selectors' choices (lessons/*.py) and the speculative
# lesson's draft model (tests/engine/cli/test_tune.py checks the selectors against it).
LESSON_PRESETS = ("tiny", "mini", "small", "draft", "moe-mini", "moe-mini-dense", "moe-tiny",
                  "moe-tiny-dense")
PROGRESS_EVERY_S = 2.0


def pin_like_the_worker() -> cores.CoreSplit:
    """Pin this process to the engine's cores, as the lab's worker pins itself (engine.lab.worker),
    and use one torch thread per core: a plan is timed, and keyed, per thread count."""
    split = cores.plan(cores.available_cores(), os.environ.get(cores.ENV, "auto"),
                       gpu=torch.cuda.is_available())
    try:
        cores.pin(0, split.engine)
    except OSError as e:  # a container that forbids it: timed unpinned, with the same threads
        print(f"could not pin to cores {list(split.engine)} ({e}): timing unpinned",
              file=sys.stderr)
    configure_threads()
    return split


def plan_on_disk(name: str) -> bool:
    """Whether the preset's plan is on disk for this process's threads, weighed in the step of
    the backend its engine takes here (the C++ one where it is built): the plan's key is read
    from the model's decode layers (as LlamaModel.planned_linears lists them, in the dtype a CPU
    build gives them) as constructed: no checkpoint read, no transposed copies."""
    cfg = get_preset(name)
    dtype = torch_dtype(cfg.dtype_name("cpu"))
    model = LlamaModel(cfg).to(dtype=dtype)
    return has_plan([m.weight for m in model.modules()
                     if isinstance(m, Linear) and m.qweight is None],
                    default_backend("cpu", dtype))


def plan_steps(name: str):
    """Build the preset's engine on the CPU, in steps (engine.steps), which times its plan where
    the cache has none: the products, then the whole decode step (step_plan)."""
    return LLMEngine.build_steps(EngineConfig(preset=name, device="cpu"))


def plan_preset(name: str) -> float | None:
    """Build the preset's engine on the CPU, which times its plan where the cache has none;
    the seconds the timing took, or None where the plan was on disk (then nothing is built)."""
    if plan_on_disk(name):
        return None
    timed_from = None
    last_said = time.monotonic()
    start = time.monotonic()
    for said in plan_steps(name):
        if " timed" in said:
            if timed_from is None:
                timed_from = start
            if time.monotonic() - last_said >= PROGRESS_EVERY_S:
                print(f"  {name}: {said} ({time.monotonic() - timed_from:.0f} s)",
                      file=sys.stderr, flush=True)
                last_said = time.monotonic()
        start = time.monotonic()  # the timing begins after the step before it
    return None if timed_from is None else time.monotonic() - timed_from


def measure_limits() -> bool:
    """The machine's limits, measured once quietly and kept (see the module's docstring);
    False when they were disturbed (then not kept: a page's `info` job measures them)."""
    if limits_on_disk("cpu"):
        print("limits already on disk")
        return True
    from ..lab.jobs.probe import measure_checked  # the worker's check (its probe, its cores)

    print("measuring the machine's memory bandwidth and matmul peak", file=sys.stderr,
          flush=True)
    limits = hardware_limits("cpu", checked=measure_checked)
    if (limits.check or {}).get("disturbed"):
        print("note: the machine's limits were disturbed by other work, so not kept (the first "
              f"page to ask measures them): {'; '.join(limits.check.get('reasons') or [])}; "
              "run `tune` again on a quiet machine", file=sys.stderr)
        return False
    print(f"limits measured: {limits.memory_bandwidth_gbs:.1f} GB/s memory bandwidth, "
          f"{limits.matmul_gflops:.1f} GFLOP/s matmul ({limits.matmul_dtype})")
    return True


def cmd_tune(args) -> int:
    presets = args.preset or list(LESSON_PRESETS)
    for name in presets:
        get_preset(name)  # an unknown name: ConfigError, one line, before anything is timed
    if resolve_device("auto") != "cpu":
        print("the engine runs on the GPU here: CPU matrix-product plans are not used")
        return 0
    split = pin_like_the_worker()
    where = (f"{torch.get_num_threads()} thread(s) on core(s) "
             f"{','.join(map(str, split.engine))}, as the lab's worker runs")
    print(f"timing matrix-product plans for {', '.join(presets)}: {where}", file=sys.stderr,
          flush=True)
    try:
        measure_limits()
        failed = 0
    except Exception as e:  # an unwritable cache, as for a plan below: one line
        failed = 1
        print(f"error: the machine's limits not measured: {type(e).__name__}: {e}",
              file=sys.stderr)
    for name in presets:
        try:
            timed = plan_preset(name)
        except Exception as e:  # a missing checkpoint, an unwritable cache: one line each
            failed += 1
            print(f"error: {name}'s plan not timed: {type(e).__name__}: {e}", file=sys.stderr)
            continue
        if timed is None:
            print(f"{name:<6} plan already on disk")
        else:
            print(f"{name:<6} plan timed in {timed:.1f} s")
    return 1 if failed else 0


def add_tune_parser(sub) -> None:
    tune = sub.add_parser("tune", help="time the lessons' models' matrix-product plans and "
                                       "measure the machine's limits (once per machine, after "
                                       "build-kernel)")
    tune.add_argument("--preset", action="append", metavar="P",
                      help=f"only this preset (repeat for more); default: "
                           f"{', '.join(LESSON_PRESETS)}")
    tune.set_defaults(func=cmd_tune)
