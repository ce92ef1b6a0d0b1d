"""The KV handover of a disaggregated run, per prompt length: how long copying a prompt's KV out
of the prefill engine's pool into shared memory (export) and into another pool (import) takes,
beside the prefill it follows.

    python bench/engine/handover.py [--preset tiny] [--lengths 16,64,256,1024] [--rounds 5]
                                    [--live]

Each round times, for every length in turn, one prefill, its export and its import on one engine
(engine.disagg.costs.time_handover), and prints them. The figures that carry over to another
machine are the ratios inside one round: handover / prefill at each length, and the copy's
bandwidth (KV bytes / handover time) against the machine's. With --live, two worker processes
(engine.disagg.live) also serve one request of each length, each arriving when the previous one
has finished, so each handover is the transfer alone (no wait for a decode step): the handover
as a run records it, queue and file-descriptor passing included. Target: at the longest length
the handover takes at most half the prefill's time.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.harness import Run  # noqa: E402
from engine.config import EngineConfig  # noqa: E402
from engine.disagg.costs import time_handover  # noqa: E402
from engine.llm_engine import LLMEngine  # noqa: E402

TARGET_HANDOVER_OVER_PREFILL = 0.5


def live_handovers(config: EngineConfig, lengths: list[int], gap_s: float) -> dict[int, float]:
    """One request of each length through two live workers, gap_s apart: {length: handover ms}."""
    from engine.disagg.live import run_live, split_cores
    from engine.lab.cores import available_cores
    from engine.serve.workload import Request

    requests = [Request(i, [1 + j % 255 for j in range(n)], 2, arrival_s=i * gap_s)
                for i, n in enumerate(lengths)]
    run = run_live(config, requests, max_batch=1, cores=split_cores(available_cores()))
    return {n: run.handover_ms[i] for i, n in enumerate(lengths)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="tiny")
    parser.add_argument("--lengths", default="16,64,256,1024")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--live", action="store_true")
    args = parser.parse_args()
    lengths = [int(n) for n in args.lengths.split(",")]

    bench = Run("handover", args)
    config = EngineConfig(preset=args.preset, device="cpu", kv_budget_bytes=256 * 2**20)
    engine = LLMEngine(config)
    engine.warm_up()
    per_token = engine.cache.bytes_per_token
    times: dict[int, dict[str, list[float]]] = {n: {"prefill": [], "export": [], "import": []}
                                                for n in lengths}
    for r in range(args.rounds):
        row = {"round": r + 1}
        for n in lengths:
            prefill, export, adopt = time_handover(engine, n)
            for name, s in (("prefill", prefill), ("export", export), ("import", adopt)):
                times[n][name].append(s)
            row[str(n)] = {"prefill_ms": round(1000 * prefill, 3),
                           "export_ms": round(1000 * export, 3),
                           "import_ms": round(1000 * adopt, 3),
                           "handover_over_prefill": round((export + adopt) / prefill, 4)}
        bench.round(row)

    summary = {}
    for n in lengths:
        med = {k: statistics.median(v) for k, v in times[n].items()}
        handover = med["export"] + med["import"]
        ratios = [(e + i) / p for p, e, i in zip(times[n]["prefill"], times[n]["export"],
                                                 times[n]["import"])]
        kv = n * per_token
        summary[n] = {"kv_bytes": kv, "prefill_ms": 1000 * med["prefill"],
                      "export_ms": 1000 * med["export"], "import_ms": 1000 * med["import"],
                      "handover_over_prefill": statistics.median(ratios),
                      "copy_gb_per_s": kv / handover / 1e9 if handover > 0 else None}
    live = live_handovers(config, lengths, gap_s=1.0) if args.live else None

    print(f"\n{'tokens':>7} {'KV MB':>8} {'prefill ms':>11} {'export ms':>10} {'import ms':>10} "
          f"{'handover/prefill':>17} {'copy GB/s':>10}" + (f" {'live ms':>8}" if live else ""))
    for n, s in summary.items():
        line = (f"{n:>7} {s['kv_bytes'] / 1e6:>8.3f} {s['prefill_ms']:>11.3f} "
                f"{s['export_ms']:>10.3f} {s['import_ms']:>10.3f} "
                f"{s['handover_over_prefill']:>17.4f} {s['copy_gb_per_s'] or 0:>10.2f}")
        print(line + (f" {live[n]:>8.2f}" if live else ""))
    longest = lengths[-1]
    bench.target(f"handover / prefill at {longest} tokens ({args.preset})",
                 summary[longest]["handover_over_prefill"], at_most=TARGET_HANDOVER_OVER_PREFILL)
    return bench.finish({"preset": args.preset, "kv_bytes_per_token": per_token,
                         "lengths": {str(n): s for n, s in summary.items()},
                         "live_handover_ms": {str(n): v for n, v in (live or {}).items()}})


if __name__ == "__main__":
    sys.exit(main())
