"""The capacity search (lesson 8) on tiny, run several times: how long it takes and whether it
gives the same N each time (issue 18 asks for under 60 s and the same N within one step in 3 of
3 runs; the step is the search's grid, engine.calc.capacity). Every round printed: N, the first
failing load, the trials run and re-run, the seconds, the load average, every load judged.

    python bench/capacity_search.py [--rounds 3] [--ttft-ms 1000] [--tok-s 20] [--max-users 32]
        [--per-doubling 4] [--requests-per-user 2] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from engine.lab import worker  # noqa: E402
from engine.lab.registry import normalize  # noqa: E402


def main() -> None:
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
    split = worker.isolate(None, None)  # pinned like the engine worker the lesson's job runs in
    print(f"load at start: {os.getloadavg()}; engine cores {split.engine} "
          f"({split.note}); params: {json.dumps(params)}", flush=True)
    rounds = []
    for i in range(args.rounds):
        start = time.perf_counter()
        result = worker.run("capacity_search", params, lambda t, d: None, lambda: False)
        seconds = time.perf_counter() - start
        rounds.append({"round": i + 1, "users": result["users"],
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
                                 for d in result["loads"]]})
        print(json.dumps(rounds[-1], indent=1), flush=True)
    ns = [r["users"] for r in rounds]
    print(f"N per round: {ns}; spread {max(ns) - min(ns)} user(s); seconds "
          f"{[r['seconds'] for r in rounds]}; load at end: {os.getloadavg()}")


if __name__ == "__main__":
    main()
