"""The capacity search (lesson 8) on tiny, run several times: how long it takes and whether it
gives the same N each time. Targets: every round under 60 s, and the rounds' N within one step
of each other (the step is the search's grid, engine.calc.capacity). Every round printed: N, the
first failing load, the trials run and re-run, the seconds, the load average, every load judged.

    python bench/lab/capacity_search.py [--rounds 3] [--ttft-ms 1000] [--tok-s 20] [--max-users 32]
        [--per-doubling 4] [--requests-per-user 2] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from bisect import bisect_left
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.harness import Run  # noqa: E402
from engine.calc.capacity import grid  # noqa: E402
from engine.lab import worker  # noqa: E402
from engine.lab.registry import normalize  # noqa: E402

TARGET_SECONDS = 60.0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--ttft-ms", type=float, default=1000.0)
    ap.add_argument("--tok-s", type=float, default=20.0)
    ap.add_argument("--max-users", type=int, default=32)
    ap.add_argument("--per-doubling", type=int, default=4, help="the search's grid (its step)")
    ap.add_argument("--requests-per-user", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3, help="most runs of one load")
    args = ap.parse_args()
    # the lesson's own settings (lessons.slo_goodput.SLOGoodputLesson.capacity_params)
    params = normalize("capacity_search", {
        "ttft_p95_ms": args.ttft_ms, "per_user_tok_s": args.tok_s,
        "max_users": args.max_users, "repeats": args.repeats,
        "requests_per_user": args.requests_per_user, "per_doubling": args.per_doubling,
        "prompt_len": [32, 128], "output_len": [16, 64], "max_batch": 8})
    bench = Run("capacity_search", args)
    split = worker.isolate(None, None)  # pinned like the engine worker the lesson's job runs in
    print(f"engine cores {split.engine} ({split.note}); params: {json.dumps(params)}", flush=True)
    rounds = bench.rounds
    for i in range(args.rounds):
        start = time.perf_counter()
        result = worker.run("capacity_search", params, lambda t, d: None, lambda: False)
        seconds = time.perf_counter() - start
        row = {"round": i + 1, "users": result["users"],
               "first_failing": result["first_failing_users"],
               "trials": result["trials_run"],
               "disturbed_reruns": result["disturbed_reruns"],
               "seconds": round(seconds, 1), "load_avg": os.getloadavg()[0],
               "verdict": result["verdict"],
               "loads": [f"{d['users']}u {len(d['trials'])} run(s) P95 TTFT "
                         f"{d['ttft_p95_ms']:.0f} [{d['ttft_ci_lo']:.0f}-"
                         f"{d['ttft_ci_hi']:.0f}] ms, n {d['requests']}, "
                         f"{d['per_user_tok_s']:.0f} tok/s, "
                         f"{'met' if d['met'] else 'missed'}"
                         for d in result["loads"]]}
        bench.round(row, json.dumps(row, indent=1))
    ns = [r["users"] for r in rounds]
    loads = grid(1, args.max_users, args.per_doubling)  # the search's grid: N's steps
    steps = max(bisect_left(loads, n) for n in ns) - min(bisect_left(loads, n) for n in ns)
    print(f"N per round: {ns}; spread {max(ns) - min(ns)} user(s); seconds "
          f"{[r['seconds'] for r in rounds]}")
    bench.target("slowest round's seconds", max(r["seconds"] for r in rounds),
                 at_most=TARGET_SECONDS)
    bench.target("rounds' N apart, in steps of the search's grid", steps, at_most=1.0)
    return bench.finish({"params": params, "users": ns})


if __name__ == "__main__":
    sys.exit(main())
