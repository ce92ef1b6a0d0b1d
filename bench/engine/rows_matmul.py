"""The few-row product alone (csrc/rows_matmul.cpp, the plan's "cpp" variant): its source at a
git revision against the working tree's, and torch's F.linear, in one run.

    python bench/engine/rows_matmul.py --old REV [--rounds 3] [--rows 1,4,8,16,32,64]
                                       [--preset small] [--threads N]

Both sources are compiled by themselves (engine.model.cpu_kernel.build_alone, about a minute
each the first time) and loaded side by side. The products are the preset's decode step's, in
its order and on weights of its shapes, one matrix per layer as in the model (small: 510 MB, so
each matrix comes from memory, not from cache): the fused q/k/v, the output projection, the
fused gate/up, the down projection, then the vocabulary head. For each round, each row count and
each kernel (interleaved), one pass through every matrix, each product timed alone: every round
is printed with its milliseconds by shape, the pass's GFLOP/s and new / old. Threads: torch's
default (the engine's), or --threads (one is steadier on a loaded machine). Targets: the new source no slower than the old at any row count (within
NO_SLOWER, the noise of a loaded machine), and at least FASTER_AT_16 times as fast at 16 rows.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.harness import ROOT, Run  # noqa: E402
from engine.config import get_preset  # noqa: E402
from engine.model.cpu_kernel import CSRC, build_alone  # noqa: E402

SOURCE = CSRC / "rows_matmul.cpp"
NO_SLOWER = 1.05  # new / old at every row count, best round against best round
FASTER_AT_16 = 1.5  # old / new at 16 rows


def shapes(preset: str) -> list[tuple[str, int, int]]:
    """(name, out, in) of one layer's products and then the head's, as engine/model/model.py
    lays them out (q/k/v fused, gate/up fused)."""
    cfg = get_preset(preset)
    qkv = (cfg.heads + 2 * cfg.kv_heads) * cfg.head_dim
    return [("qkv", qkv, cfg.hidden), ("o", cfg.hidden, cfg.heads * cfg.head_dim),
            ("gate_up", 2 * cfg.intermediate, cfg.hidden),
            ("down", cfg.hidden, cfg.intermediate), ("head", cfg.vocab, cfg.hidden)]


def old_source(rev: str) -> str:
    path = SOURCE.relative_to(ROOT).as_posix()
    out = subprocess.run(["git", "show", f"{rev}:{path}"], cwd=ROOT, capture_output=True,
                         text=True, timeout=30)
    if out.returncode != 0:
        sys.exit(f"error: no {path} at {rev!r}: {out.stderr.strip()}")
    return out.stdout


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--old", required=True, help="git revision of the old source")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--rows", default="1,4,8,16,32,64")
    parser.add_argument("--preset", default="small")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: its default)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    rows = [int(r) for r in args.rows.split(",")]
    run = Run("rows_matmul", args)
    tick = lambda s: print(f"  still compiling, {s:.0f} s", flush=True)  # noqa: E731
    print(f"building the source at {args.old} and the working tree's", flush=True)
    kernels = {"old": build_alone(old_source(args.old), "rows_old", tick=tick).rows_matmul,
               "new": build_alone(SOURCE.read_text(), "rows_new", tick=tick).rows_matmul,
               "torch": F.linear}
    path = getattr(torch.ops.rows_new, "rows_matmul_path", None)
    cfg = get_preset(args.preset)
    gen = torch.Generator().manual_seed(0)
    layer = shapes(args.preset)
    weights = [(name, torch.randn(n, k, generator=gen) / k ** 0.5)
               for _ in range(cfg.layers) for name, n, k in layer[:-1]]
    weights.append((layer[-1][0], torch.randn(*layer[-1][1:], generator=gen) / cfg.hidden ** 0.5))
    inputs = {k: torch.randn(max(rows), k, generator=gen) for _, _, k in layer}
    flops = {m: 2 * m * sum(w.numel() for _, w in weights) for m in rows}
    print(f"{args.preset}: {len(weights)} matrices, "
          f"{sum(w.numel() for _, w in weights) * 4 / 1e6:.0f} MB; threads "
          f"{torch.get_num_threads()}; new kernel's path: {path() if path else '?'}", flush=True)
    for m in rows:  # the same products, to float tolerance, before any timing
        for _, w in weights[:len(layer) - 1] + weights[-1:]:
            x = inputs[w.shape[1]][:m]
            expect = x @ w.t()
            for kernel in ("old", "new"):
                torch.testing.assert_close(kernels[kernel](x, w), expect, atol=1e-4, rtol=1e-4)

    def one_pass(m: int, kernel: str) -> tuple[dict[str, float], float]:
        """Seconds by shape (wall), and the whole pass's CPU seconds (every thread's)."""
        by_shape = dict.fromkeys((name for name, _, _ in layer), 0.0)
        f = kernels[kernel]
        cpu = time.process_time()
        for name, w in weights:
            x = inputs[w.shape[1]][:m]
            start = time.perf_counter()
            f(x, w)
            by_shape[name] += time.perf_counter() - start
        return by_shape, time.process_time() - cpu

    best: dict[tuple[int, str], float] = {}
    best_cpu: dict[tuple[int, str], float] = {}
    for r in range(args.rounds):
        for m in rows:
            line = {}
            for kernel in kernels:
                times, cpu = one_pass(m, kernel)
                total = sum(times.values())
                best[m, kernel] = min(best.get((m, kernel), float("inf")), total)
                best_cpu[m, kernel] = min(best_cpu.get((m, kernel), float("inf")), cpu)
                line[kernel] = {"ms": round(1000 * total, 2), "cpu_ms": round(1000 * cpu, 2),
                                "gflops": round(flops[m] / total / 1e9, 1),
                                **{k: round(1000 * v, 2) for k, v in times.items()}}
            ratio = line["new"]["ms"] / line["old"]["ms"]
            run.round({"round": r + 1, "rows": m, **line, "new_over_old": round(ratio, 3)},
                      f"round {r + 1}, {m:2d} rows: " + "; ".join(
                          f"{k} {v['ms']:7.2f} ms (CPU {v['cpu_ms']:7.2f}) {v['gflops']:6.1f} "
                          "GFLOP/s (" + " ".join(f"{s} {v[s]:.2f}" for s, _, _ in layer) + ")"
                          for k, v in line.items()) + f"; new/old {ratio:.3f}")
    summary = {}
    print("\nbest round, ms a pass (wall; CPU seconds of every thread beside it, which a loaded"
          " machine's waits do not add to):\nrows | old | new | torch | new/old | new GFLOP/s |"
          " CPU: old | new | new/old")
    for m in rows:
        o, n, t = (best[m, k] for k in ("old", "new", "torch"))
        co, cn = best_cpu[m, "old"], best_cpu[m, "new"]
        summary[m] = {"old_ms": round(1000 * o, 2), "new_ms": round(1000 * n, 2),
                      "torch_ms": round(1000 * t, 2), "new_over_old": round(n / o, 3),
                      "new_gflops": round(flops[m] / n / 1e9, 1),
                      "old_cpu_ms": round(1000 * co, 2), "new_cpu_ms": round(1000 * cn, 2),
                      "cpu_new_over_old": round(cn / co, 3)}
        print(f"{m:3d} | {1000 * o:8.2f} | {1000 * n:8.2f} | {1000 * t:8.2f} | {n / o:.3f} | "
              f"{flops[m] / n / 1e9:.1f} | {1000 * co:8.2f} | {1000 * cn:8.2f} | {cn / co:.3f}")
        run.target(f"{m} rows: new / old", n / o, at_most=NO_SLOWER)
    if 16 in rows:
        run.target("16 rows: old / new", best[16, "old"] / best[16, "new"], at_least=FASTER_AT_16)
    ratios = [summary[m]["new_over_old"] for m in rows]
    return run.finish({"preset": args.preset, "threads": torch.get_num_threads(),
                       "path": path() if path else None, "best": summary,
                       "median_new_over_old": statistics.median(ratios)})


if __name__ == "__main__":
    sys.exit(main())
