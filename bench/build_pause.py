"""What a model's build costs the other readers: short jobs arriving while the engine service
builds the small preset (the roofline lesson on `small`, from an empty cache, as in a class).

    python bench/build_pause.py [--rounds 2] [--every 1.0]

Each round starts an engine service with an empty measurement cache (so the small preset's
matrix-product plan is timed too, as on a class's first run), builds tiny with one knob point,
then submits one small-preset roofline point (batch 1) and, every --every seconds while it is
not done, one tiny knob point from another reader (uncached). Prints, every round: the small
point's time from submit to result and how often its build was paused; each knob point's time
from submit to result (p50, max); the service's preemption count. The engine's own clock only:
no pages. Run it under /work/tools/heavy; compare a branch against main by running this same
file in a checkout of each (it uses the service's public API only).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

from engine.lab.client import EngineService

SMALL_POINT = {"preset": "small", "batch_size": 1, "prompt_len": 128, "new_tokens": 32}
KNOB_POINT = {"prompt_len": 64, "new_tokens": 32}  # tiny, the knob lesson's shape
TIMEOUT_S = 300.0


def one_round(every_s: float, index: int) -> dict:
    cache = tempfile.mkdtemp(prefix="build-pause-cache-")
    os.environ["LLM_SPEED_CACHE"] = cache  # the worker inherits it: an empty cache, plan too
    service = EngineService(cache_path=None)
    try:
        start = time.time()
        while not service.status()["ready"]:
            if time.time() - start > TIMEOUT_S:
                raise SystemExit(f"the worker did not start: {service.status()['start_error']}")
            time.sleep(0.1)
        first = service.submit("sweep_point", {**KNOB_POINT, "batch_size": 1}, use_cache=False,
                               session_id="warm")
        first.wait(TIMEOUT_S)  # tiny built (and its plan timed), as once a class has begun
        ended: dict[int, float] = {}  # job id -> when its final event came

        def on_point(event) -> None:
            if event.final:
                ended[event.job_id] = time.time()

        t0 = time.time()
        small = service.submit("sweep_point", SMALL_POINT, session_id="roofline",
                               use_cache=False)
        points = []
        batch = 1
        while not small.wait(every_s) and time.time() - t0 < TIMEOUT_S:
            batch = batch % 16 + 1
            points.append((time.time(), service.submit(
                "sweep_point", {**KNOB_POINT, "batch_size": batch, "seed": len(points)},
                on_point, use_cache=False, session_id=f"student-{len(points)}")))
        small_s = time.time() - t0
        for _, job in points:
            job.wait(TIMEOUT_S)
        time.sleep(0.1)  # the last final events delivered
        waits = [ended.get(job.id, time.time()) - submitted for submitted, job in points]
        status = service.status()
    finally:
        service.shutdown()
    row = {"round": index, "small_point_s": round(small_s, 2), "small_state": small.state,
           "build_pauses": getattr(small, "paused", 0),  # main before this change: none "knob_points": len(points),
           "knob_p50_s": round(statistics.median(waits), 2) if waits else None,
           "knob_max_s": round(max(waits), 2) if waits else None,
           "knob_s": [round(w, 2) for w in waits], "preemptions": status["preemptions"]}
    print(f"round {index}: small point {row['small_point_s']:.1f} s ({small.state}, build "
          f"paused {row['build_pauses']}x); {len(waits)} knob points submit->result p50 "
          f"{row['knob_p50_s']} s max {row['knob_max_s']} s; every: {row['knob_s']}",
          flush=True)
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--every", type=float, default=1.0, help="seconds between knob points")
    args = parser.parse_args(argv)
    load = os.getloadavg()
    print(f"{os.cpu_count()} CPUs, load average before {load[0]:.2f}", flush=True)
    rows = [one_round(args.every, i) for i in range(args.rounds)]
    print(json.dumps({"bench": "build_pause", "load_average_before": round(load[0], 2),
                      "load_average_after": round(os.getloadavg()[0], 2), "rounds": rows}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
