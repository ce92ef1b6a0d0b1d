"""Each job kind against the time bounds the registry states for it (engine.lab.registry: a Bound
is seconds at params, the largest job a lesson starts with its default settings), on this machine.

    python bench/lab/job_bounds.py [--rounds 2] [--kind sweep_point ...] [--batch-sizes 1,16,64]
                                   [--preset mini]

Runs every kind at its bound's inputs in this process, as the worker runs it (engine.lab.worker
.run, the engine built and warmed up first, so a model's one-off build is reported apart), with a
measurement cache of its own; prints every round's seconds, the ratio to the bound and whether it
held, and the machine's load average before and after (a busy machine slows every job).
--batch-sizes times each bound that has a batch size at these batch sizes too (what a knob point
costs across the slider: `--kind sweep_point --preset mini --batch-sizes 1,16,64`), each against
the bound; --preset keeps only the bounds stated on that preset.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: engine, bench

os.environ.setdefault("LLM_SPEED_CACHE", tempfile.mkdtemp(prefix="job-bounds-cache-"))

from bench.harness import Run  # noqa: E402
from engine.lab.jobs.engines import engine_for  # noqa: E402 (after the cache is set)
from engine.lab.registry import BOUNDS_MACHINE, JOBS  # noqa: E402
from engine.lab.worker import body, run  # noqa: E402


def at_batch_sizes(bound, batch_sizes: list[int]) -> list:
    """The bound, and where its params have a batch size, the bound at each of batch_sizes."""
    if not batch_sizes or "batch_size" not in bound.at:
        return [bound]
    return [dataclasses.replace(bound, at={**bound.at, "batch_size": b},
                                what=f"{bound.what}, at batch {b}") for b in batch_sizes]


def time_bound(bench: Run, kind: str, bound, rounds: int) -> dict:
    params = JOBS[kind].check(bound.at)
    if "preset" in params and "device" in params:  # the worker's engine, built once
        start = time.perf_counter()
        engine_for(params["preset"], params["device"], params["backend"],
                   params["kv_budget_mib"], params["random_weights"],
                   weight_format=params.get("weight_format", "fp32"))  # warmed once per worker
        print(f"{kind:<14} engine built in {time.perf_counter() - start:.1f} s (once)")
    times = []
    for r in range(rounds):
        start = time.perf_counter()
        run(kind, bound.at, lambda *_: None, lambda: False)
        times.append(time.perf_counter() - start)
        bench.round({"kind": kind, "what": bound.what, "round": r, "seconds": round(times[-1], 3),
                     "bound_s": bound.seconds},
                    f"{kind:<14} {bound.what:<44} round {r}: {times[-1]:6.2f} s  bound "
                    f"{bound.seconds:5.1f} s  ratio {times[-1] / bound.seconds:4.2f}")
    bench.target(f"{kind} {bound.what}: slowest round / its bound", max(times) / bound.seconds,
                 at_most=1.0)
    return {"kind": kind, "what": bound.what, "bound_s": bound.seconds, "at": bound.at,
            "seconds": [round(t, 3) for t in times], "held": max(times) <= bound.seconds}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--kind", action="append", choices=sorted(JOBS),
                        help="only this kind (repeat for more); default: every kind")
    parser.add_argument("--preset", help="only the bounds stated on this preset")
    parser.add_argument("--batch-sizes", type=lambda t: [int(b) for b in t.split(",")],
                        default=[], help="also time each bound with a batch size at these, "
                                         "e.g. 1,16,64")
    args = parser.parse_args(argv)
    # the endpoint kinds' bound is their timeout on the teacher's server, not a time measured here
    kinds = args.kind or [kind for kind in JOBS if not kind.startswith("endpoint_")]
    bench = Run("job_bounds", args)
    for spec in JOBS.values():
        body(spec)  # imported before any timing, as the worker does at start
    rows = []
    print(f"bounds stated for: {BOUNDS_MACHINE}; here: {os.cpu_count()} CPUs")
    for kind in kinds:
        for stated in JOBS[kind].bounds:
            if args.preset and JOBS[kind].check(stated.at).get("preset") != args.preset:
                continue
            for bound in at_batch_sizes(stated, args.batch_sizes):
                rows.append(time_bound(bench, kind, bound, args.rounds))
    return bench.finish({"bounds_machine": BOUNDS_MACHINE, "kinds": rows})


if __name__ == "__main__":
    sys.exit(main())
