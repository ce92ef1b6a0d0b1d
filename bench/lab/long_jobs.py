"""What a long job costs the other readers, and what giving way costs the long job: short knob
points arriving while the engine service builds the small preset's model (the roofline lesson
on `small`, from an empty cache, as on a class's first run) or runs lesson 2's load test.

    python bench/lab/long_jobs.py [--rounds 2] [--every 1.0] [--scenario build|load|both]

Each round starts an engine service with an empty measurement cache (the matrix-product plans
are timed too) and builds tiny with one knob point. Then, per scenario:
- build: one small-preset roofline point (batch 1), and every --every seconds while it is not
  done one tiny knob point from another reader (uncached);
- load: lesson 2's load test at its defaults alone, then again with the knob points beside it;
  its P95 TTFT and median TPOT both times (a pause must not change what it measures).
Prints every round: the long job's time from submit to result and how often it gave way; each
knob point's time from submit to result (p50, max). The engine's own clock only: no pages.
Run it on a quiet machine; to compare a branch with main, run this same file in a checkout
of each (it uses the service's public API only).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: engine, bench

from bench.harness import Run  # noqa: E402
from engine.lab.client import EngineService  # noqa: E402

SMALL_POINT = {"preset": "small", "batch_size": 1, "prompt_len": 128, "new_tokens": 32}
KNOB_POINT = {"prompt_len": 64, "new_tokens": 32}  # tiny, the knob lesson's shape
TIMEOUT_S = 300.0


def started_service() -> EngineService:
    """A service on an empty cache (the worker inherits it), tiny built."""
    os.environ["LLM_SPEED_CACHE"] = tempfile.mkdtemp(prefix="long-jobs-cache-")
    service = EngineService()
    start = time.time()
    while not service.status()["ready"]:
        if time.time() - start > TIMEOUT_S:
            raise SystemExit(f"the worker did not start: {service.status()['start_error']}")
        time.sleep(0.1)
    service.submit("sweep_point", {**KNOB_POINT, "batch_size": 1}, use_cache=False,
                   session_id="warm").wait(TIMEOUT_S)
    return service


def beside(service: EngineService, kind: str, params: dict, every_s: float | None) -> dict:
    """Run one long job; with every_s, a knob point from a new reader every every_s seconds
    until it is done. Its time, how often it gave way, its result, the points' times."""
    ended: dict[int, float] = {}

    def on_point(event) -> None:
        if event.final:
            ended[event.job_id] = time.time()

    t0 = time.time()
    long = service.submit(kind, params, session_id="long", use_cache=False)
    points = []
    while not long.wait(every_s or TIMEOUT_S) and time.time() - t0 < TIMEOUT_S:
        if every_s:
            points.append((time.time(), service.submit(
                "sweep_point", {**KNOB_POINT, "batch_size": len(points) % 16 + 1,
                                "seed": len(points)},
                on_point, use_cache=False, session_id=f"student-{len(points)}")))
    long_s = time.time() - t0
    for _, job in points:
        job.wait(TIMEOUT_S)
    waits = [ended.get(job.id, time.time()) - submitted for submitted, job in points]
    return {"long_s": round(long_s, 2), "state": long.state, "result": long.result,
            "gave_way": getattr(long, "paused", 0) + long.preempted,
            "points": len(waits), "point_p50_s": round(statistics.median(waits), 2)
            if waits else None, "point_max_s": round(max(waits), 2) if waits else None,
            "point_s": [round(w, 2) for w in waits]}


def show(label: str, row: dict) -> None:
    print(f"  {label}: {row['long_s']:.1f} s ({row['state']}, gave way {row['gave_way']}x); "
          f"{row['points']} knob points submit->result p50 {row['point_p50_s']} s max "
          f"{row['point_max_s']} s; every: {row['point_s']}", flush=True)


def load_figures(result: dict | None) -> dict:
    m = (result or {}).get("metrics") or {}
    return {"ttft_p95_ms": (m.get("ttft_ms") or {}).get("p95"),
            "tpot_p50_ms": (m.get("tpot_ms") or {}).get("p50"),
            "disturbed": ((result or {}).get("check") or {}).get("disturbed")}


def one_round(index: int, every_s: float, scenarios: list[str]) -> dict:
    row: dict = {"round": index}
    print(f"round {index}", flush=True)
    if "build" in scenarios:
        service = started_service()
        try:
            row["build"] = beside(service, "sweep_point", SMALL_POINT, every_s)
        finally:
            service.shutdown()
        show("small point (builds the model)", row["build"])
        row["build"].pop("result")
    if "load" in scenarios:
        service = started_service()
        try:
            alone = beside(service, "load_test", {}, None)
            busy = beside(service, "load_test", {}, every_s)
        finally:
            service.shutdown()
        show("load test alone", alone)
        show("load test with points", busy)
        a, b = load_figures(alone.pop("result")), load_figures(busy.pop("result"))
        print(f"  load test alone / with points: P95 TTFT {a['ttft_p95_ms']} / "
              f"{b['ttft_p95_ms']} ms, median TPOT {a['tpot_p50_ms']} / {b['tpot_p50_ms']} ms, "
              f"disturbed {a['disturbed']} / {b['disturbed']}", flush=True)
        row["load"] = {"alone": {**alone, **a}, "with_points": {**busy, **b}}
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--every", type=float, default=1.0, help="seconds between knob points")
    parser.add_argument("--scenario", choices=("build", "load", "both"), default="both")
    args = parser.parse_args(argv)
    scenarios = ["build", "load"] if args.scenario == "both" else [args.scenario]
    bench = Run("long_jobs", args)
    for i in range(args.rounds):
        bench.round(one_round(i, args.every, scenarios), f"round {i} done")
    return bench.finish({})


if __name__ == "__main__":
    sys.exit(main())
