"""Per-step fixed cost: one decode step of a small model at batch 1, and how many op calls it makes.

A decode step of `tiny` reads 22 MB of weights, which on a CPU with a 32 MB L3 cache should take
well under a millisecond; what it costs beyond that is the framework's per-call overhead (a few
microseconds per op call, a few hundred calls a step). This bench shows both, and compares two
checkouts of the engine in one run (so the ratio shares the machine's load):

    python bench/step_overhead.py [--base DIR] [--preset tiny] [--batch 1] [--rounds 7]

Each checkout runs in its own process (PYTHONPATH = that tree), started once; the driver asks them
for a round in turn (alternating which goes first), each round timing `--steps` decode steps
(median step). Before timing, each counts the top-level op calls of one step with torch.profiler
(a count, not a time: it does not depend on the load). Every round is printed, then the median of
the per-round ratios (base / this tree: above 1 means this tree is faster). The load average is
printed at the start and the end. Without --base only this tree is measured. A few seconds.
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

HERE = Path(__file__).resolve().parent.parent
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


class Tree:
    """One checkout's worker process."""

    def __init__(self, name: str, root: Path, args):
        self.name = name
        env = dict(os.environ, PYTHONPATH=str(root))
        cmd = [sys.executable, str(HERE / "bench" / "step_overhead.py"), "--worker",
               "--preset", args.preset, "--batch", str(args.batch), "--steps", str(args.steps),
               "--rounds", str(args.rounds)]
        self.proc = subprocess.Popen(cmd, env=env, cwd=root, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)
        self.info = self._read()

    def _read(self) -> dict:
        line = self.proc.stdout.readline()
        if not line:
            sys.exit(f"error: the {self.name} worker stopped (see its messages above)")
        return json.loads(line)

    def round(self) -> float:
        self.proc.stdin.write("round\n")
        self.proc.stdin.flush()
        return self._read()["ms"]

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", type=Path, help="another checkout to compare with")
    parser.add_argument("--preset", default="tiny")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--steps", type=int, default=100, help="decode steps per round")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.preset, args.batch, args.steps, args.rounds)
        return
    print(f"load average at start: {os.getloadavg()[0]:.2f} (1 min)", flush=True)
    print(f"{args.preset}, batch {args.batch}, {PROMPT_LEN}-token prompts, median of "
          f"{args.steps} decode steps per round", flush=True)
    trees = [Tree("this tree", HERE, args)]
    if args.base:
        trees.insert(0, Tree("base", args.base.resolve(), args))
    for tree in trees:
        print(f"{tree.name}: {tree.info['ops']} op calls per step "
              f"(attention backend {tree.info['backend']})", flush=True)
    rows = []
    for r in range(args.rounds):
        order = trees if r % 2 == 0 else trees[::-1]
        ms = {tree.name: tree.round() for tree in order}
        rows.append(ms)
        text = "  ".join(f"{name} {value:.3f} ms" for name, value in ms.items())
        if args.base:
            text += f"  base / this tree {ms['base'] / ms['this tree']:.3f}"
        print(f"round {r + 1}: {text}", flush=True)
    for tree in trees:
        tree.close()
    for tree in trees:
        print(f"{tree.name}: median {statistics.median(row[tree.name] for row in rows):.3f} ms "
              f"per step", flush=True)
    if args.base:
        ratio = statistics.median(row["base"] / row["this tree"] for row in rows)
        print(f"median ratio base / this tree: {ratio:.3f}", flush=True)
    print(f"load average at end: {os.getloadavg()[0]:.2f} (1 min)", flush=True)


if __name__ == "__main__":
    main()
