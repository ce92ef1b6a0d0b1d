"""What a load test measures when its idle gaps run other readers' points (engine.lab.worker
fill_gap), against the same load test alone: one service, the tiny engine, rounds alternating.

    python bench/lab/gap_fill.py [--rounds 3] [--points 12]

Each round runs the load test alone, then again with --points knob points submitted while it
serves (other readers, so they go into its gaps; pausing is off, so only gaps let them in), and
prints, for both: the load test's wall time, its TTFT p50 / p95, its queue wait p95 and its
median engine step (the spread's p50), and how many points were answered before it ended. The
load test's figures should not move (its clock stops for whatever a point takes past a gap);
its wall time grows by that overrun. The median step is also printed for the first step after
each idle gap (where a point may have run) and for the others.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.harness import Run  # noqa: E402
from engine.lab.client import EngineService  # noqa: E402

LOAD = {"rate": 4.0, "requests": 24, "long_share": 0.0, "short_prompt": [8, 16],
        "short_output": [4, 8], "kv_budget_mib": 64}
IDLE_S = 0.02  # a step starting this long after the last one ended follows an idle gap
POINT = {"preset": "tiny", "kv_budget_mib": 64, "prompt_len": 16, "new_tokens": 8}


def ready(svc: EngineService) -> None:
    deadline = time.monotonic() + 180
    while not svc.status()["ready"]:
        if time.monotonic() > deadline:
            raise SystemExit(f"the engine worker did not start: {svc.status()['start_error']}")
        time.sleep(0.05)


def figures(job, started: float) -> dict:
    r = job.result
    m = r["metrics"]
    steps = r["steps"]
    after_idle, others = [], []  # the first step after an idle gap (a point may have run there)
    for a, b in zip(steps, steps[1:]):
        ms = 1000 * (b["end_s"] - b["start_s"])
        (after_idle if b["start_s"] - a["end_s"] >= IDLE_S else others).append(ms)
    return {"wall_s": time.monotonic() - started, "ttft_p50_ms": m["ttft_ms"]["p50"],
            "ttft_p95_ms": m["ttft_ms"]["p95"], "queue_p95_ms": m["queue_ms"]["p95"],
            "step_p50_ms": r["spread"]["p50"], "step_p90_ms": r["spread"]["p90"],
            "after_idle_p50_ms": statistics.median(after_idle) if after_idle else 0.0,
            "other_steps_p50_ms": statistics.median(others) if others else 0.0,
            "disturbed": r["check"]["disturbed"]}


def one(svc: EngineService, seed: int, points: int) -> dict:
    started = time.monotonic()
    load = svc.submit("load_test", {**LOAD, "seed": seed}, session_id="teacher",
                      use_cache=False)
    jobs = []
    if points:
        time.sleep(0.5)  # it is serving
        jobs = [svc.submit("sweep_point", {**POINT, "batch_size": 1 + i % 8, "seed": seed + i},
                           session_id=f"student{i}", use_cache=False) for i in range(points)]
    assert load.wait(300) and load.state == "done", load.error
    out = figures(load, started)
    out["points_before"] = sum(j.state == "done" for j in jobs)
    for j in jobs:
        j.wait(300)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--points", type=int, default=12)
    args = parser.parse_args()
    bench = Run("gap_fill", args)
    svc = EngineService(cache_path=Path(tempfile.mkdtemp()) / "results")
    svc.preempt_after_s = 1e9  # no pausing: a point gets in through a gap or after the run
    try:
        ready(svc)
        svc.submit("sweep_point", POINT, session_id="teacher").wait(120)  # built, answered
        one(svc, 99, 0)  # warm
        rows = {"alone": [], "gaps lent": []}
        for i in range(args.rounds):
            for name, points in (("alone", 0), ("gaps lent", args.points)):
                row = one(svc, 40, points)  # the same workload every time
                rows[name].append(row)
                bench.round({"round": i + 1, "run": name, **row},
                            f"round {i + 1} {name:9s} " + "  ".join(
                                f"{k} {v:.1f}" if isinstance(v, float) else f"{k} {v}"
                                for k, v in row.items()))
        medians = {}
        for key in ("ttft_p50_ms", "ttft_p95_ms", "queue_p95_ms", "step_p50_ms", "step_p90_ms",
                    "after_idle_p50_ms", "other_steps_p50_ms", "wall_s"):
            a = statistics.median(r[key] for r in rows["alone"])
            b = statistics.median(r[key] for r in rows["gaps lent"])
            print(f"median {key:12s} alone {a:8.2f}  gaps lent {b:8.2f}  ratio {b / a:.3f}")
            medians[key] = {"alone": a, "gaps_lent": b, "ratio": b / a if a else None}
        gap_fills = svc.status()["gap_fills"]
        print(f"gap fills: {gap_fills}")
    finally:
        svc.shutdown()
    return bench.finish({"medians": medians, "gap_fills": gap_fills})


if __name__ == "__main__":
    sys.exit(main())
