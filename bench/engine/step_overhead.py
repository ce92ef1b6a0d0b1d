"""Per-step fixed cost: one decode step of a small model at batch 1, and how many op calls it makes.

A decode step of `tiny` reads 22 MB of weights, which on a CPU with a 32 MB L3 cache should take
well under a millisecond; what it costs beyond that is the framework's per-call overhead (a few
microseconds per op call, a few hundred calls a step). This bench shows both, and compares two
checkouts of the engine in one run (so the ratio shares the machine's load):

    python bench/engine/step_overhead.py [--base DIR] [--preset tiny] [--batch 1] [--rounds 7]
                                  [--workers 2]

Each checkout runs in worker processes (PYTHONPATH = that tree), two by default, started in the
order A B B A; each round times `--steps` decode steps (median step) in every worker, in that
order or its reverse (alternating), so neither tree always goes first, or starts first. Why two:
with one worker per tree, an A/A run (two identical trees) can favour one of them by several
percent, whatever the cause (start order, where a process's memory lands), so each round prints
every worker, a tree's time is the mean of its workers', and an A/A line (each tree's first
worker / its second) shows how far two processes of one tree differ: a ratio between trees
within that of 1 is no difference. Before timing, each worker counts the top-level op calls of
one step with torch.profiler (a count, not a time: it does not depend on the load). Every round
is printed, then the median of the per-round ratios (base / this tree: above 1 means this tree
is faster). Without --base only this tree is measured. A few seconds. The load average before
and after, and the JSON result last, come from bench/harness.py; it states no target (the
engine's per-step targets are bench/engine/engine_speed.py's).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parents[2]
PROMPT_LEN = 128


def worker(preset: str, batch: int, steps: int, rounds: int) -> None:
    """Serve rounds on stdin/stdout: one JSON line (the op count) first, then one per round."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    from engine.config import EngineConfig
    from engine.llm_engine import LLMEngine
    from engine.sweep import sweep_prompts

    engine = LLMEngine(EngineConfig(preset=preset, device="cpu", kv_budget_bytes=2**28))
    engine.warm_up()
    new_tokens = steps * (rounds + 1) + 8
    prompts = sweep_prompts(engine.tokenizer.vocab_size, batch, PROMPT_LEN, 0)
    seqs = [engine.new_sequence(p, new_tokens, ignore_eos=True) for p in prompts]
    for seq in seqs:
        engine.reserve(seq, PROMPT_LEN)
    engine.step([], [(seq, PROMPT_LEN) for seq in seqs])

    def step() -> None:
        for seq in seqs:
            engine.reserve(seq, 1)
        engine.step(seqs, [])

    for _ in range(steps):
        step()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        step()
    ops = sum(1 for e in prof.events() if e.cpu_parent is None)
    print(json.dumps({"ops": ops, "backend": engine.backend, "torch": torch.__version__}),
          flush=True)
    for line in sys.stdin:
        if line.strip() != "round":
            break
        times = []
        for _ in range(steps):
            start = time.perf_counter()
            step()
            times.append(time.perf_counter() - start)
        print(json.dumps({"ms": 1000 * statistics.median(times)}), flush=True)


class Worker:
    """One worker process of a checkout."""

    def __init__(self, tree: str, root: Path, args):
        self.tree = tree
        env = dict(os.environ, PYTHONPATH=str(root))
        cmd = [sys.executable, str(Path(__file__).resolve()), "--worker",
               "--preset", args.preset, "--batch", str(args.batch), "--steps", str(args.steps),
               "--rounds", str(args.rounds)]
        self.proc = subprocess.Popen(cmd, env=env, cwd=root, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)
        self.info = self._read()

    def _read(self) -> dict:
        line = self.proc.stdout.readline()
        if not line:
            sys.exit(f"error: a worker of {self.tree} stopped (see its messages above)")
        return json.loads(line)

    def round(self) -> float:
        self.proc.stdin.write("round\n")
        self.proc.stdin.flush()
        return self._read()["ms"]

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


def start_workers(trees: dict[str, Path], count: int, args) -> list[Worker]:
    """`count` workers per tree, started in the order A B B A A B ... (with one tree: A A ...),
    so no tree's workers all start first."""
    names = list(trees)
    order = []
    for i in range(count):
        order += names if i % 2 == 0 else names[::-1]
    return [Worker(name, trees[name], args) for name in order]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", type=Path, help="another checkout to compare with")
    parser.add_argument("--preset", default="tiny")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--steps", type=int, default=100, help="decode steps per round")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--workers", type=int, default=2, help="worker processes per tree")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.preset, args.batch, args.steps, args.rounds)
        return 0
    if args.workers < 1 or args.rounds < 1 or args.steps < 1:
        sys.exit("error: --workers, --rounds and --steps must be at least 1")
    # Here, not at the top: a worker imports the engine of its own tree (PYTHONPATH), never this.
    sys.path.insert(0, str(HERE))
    from bench.harness import Run

    run = Run("step_overhead", {**vars(args), "base": str(args.base) if args.base else None})
    print(f"{args.preset}, batch {args.batch}, {PROMPT_LEN}-token prompts, median of "
          f"{args.steps} decode steps per round, {args.workers} worker(s) per tree", flush=True)
    trees = {"base": args.base.resolve()} if args.base else {}
    trees["this tree"] = HERE
    workers = start_workers(trees, args.workers, args)
    for name in trees:
        info = next(w.info for w in workers if w.tree == name)
        print(f"{name}: {info['ops']} op calls per step (attention backend {info['backend']})",
              flush=True)
    rows, aa = [], {name: [] for name in trees}
    for r in range(args.rounds):
        order = workers if r % 2 == 0 else workers[::-1]
        times = {id(w): w.round() for w in order}
        per_tree = {name: [times[id(w)] for w in workers if w.tree == name] for name in trees}
        ms = {name: statistics.fmean(values) for name, values in per_tree.items()}
        rows.append(ms)
        text = "  ".join(f"{name} {ms[name]:.3f} ms ("
                         + ", ".join(f"{v:.3f}" for v in values) + ")"
                         for name, values in per_tree.items())
        if args.base:
            text += f"  base / this tree {ms['base'] / ms['this tree']:.3f}"
        if args.workers > 1:
            for name, values in per_tree.items():
                aa[name].append(values[0] / values[1])
            text += "  A/A " + ", ".join(f"{name} {aa[name][-1]:.3f}" for name in trees)
        run.round({"round": r + 1, **{f"{name} ms": v for name, v in ms.items()}},
                  f"round {r + 1}: {text}")
    for w in workers:
        w.close()
    result: dict = {"preset": args.preset, "batch": args.batch,
                    "op_calls_per_step": {name: next(w.info["ops"] for w in workers
                                                     if w.tree == name) for name in trees},
                    "median_step_ms": {}}
    for name in trees:
        result["median_step_ms"][name] = statistics.median(row[name] for row in rows)
        print(f"{name}: median {result['median_step_ms'][name]:.3f} ms per step", flush=True)
    if args.workers > 1:
        result["a_a"] = {name: statistics.median(aa[name]) for name in trees}
        print("A/A, median of each tree's first worker / its second (1 = processes alike): "
              + ", ".join(f"{name} {result['a_a'][name]:.3f}" for name in trees), flush=True)
    if args.base:
        result["base_over_this_tree"] = statistics.median(
            row["base"] / row["this tree"] for row in rows)
        print(f"median ratio base / this tree: {result['base_over_this_tree']:.3f}", flush=True)
    return run.finish(result)


if __name__ == "__main__":
    sys.exit(main())
