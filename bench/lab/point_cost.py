"""Where a knob point's engine time goes, as the worker runs a class's points one after another.

    python bench/lab/point_cost.py [--points 40] [--rounds 2] [--seed 0]

A class sends `sweep_point` jobs at the knob's settings (tiny; batch 3-64, prompt 32-96, 16-32
new tokens), each reader's batch size different from the last job's. This runs such a sequence
in this process through engine.lab.worker.run, pinned to the engine's cores with one torch
thread per core as the worker is (engine.lab.worker.isolate), doing what the worker does for
each job: the engine looked up, the KV pool fitted, the disturbance check with its calibration
probes, the point's warm-up and timed steps; the engine is built and warmed once before.

Rounds alternate between the before-probe taken afresh for every job ("probe each", as before
engine.lab.jobs.probe.FRESH_S) and the last job's after-probe reused ("probe reused"), so the
two are compared in one run; every round prints its points per second and, summed over its
points, the seconds spent in each part:

  timed      the point's own measurement: its prefill and its decode steps (the result's TTFT
             plus every decode step it timed; the sweep's first untimed steps are under "other")
  fit_kv     resizing the KV pool and the engine's warm-up after each resize
  probe      the calibration probes before and after (engine.lab.jobs.probe)
  other      the rest of run(): parameter checks, prompts, the untimed first decode steps,
             the disturbance accounting, the result's JSON round trip (worker.plain)

with the machine's load average before and after (run it on a quiet machine: a busy machine
slows every part). Last, one point run inside a paused job's pause (its engine set aside, as
engine.lab.worker.pause does): the sibling engine it gets now, against the model build it
started before (engine.lab.jobs.engines).
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: engine, bench

os.environ.setdefault("LLM_SPEED_CACHE", tempfile.mkdtemp(prefix="point-cost-cache-"))

from bench.harness import Run  # noqa: E402
from engine.lab.jobs import engines, measure, probe  # noqa: E402 (after the cache is set)
from engine.lab.registry import JOBS  # noqa: E402
from engine.lab.worker import isolate, plain, run  # noqa: E402
from engine.steps import run_steps  # noqa: E402

PARTS = ("timed", "fit_kv", "probe", "other")


def knob_points(count: int, seed: int) -> list[dict]:
    """A class's knob points: random settings within the knob's ranges, the batch size never
    the same as the previous job's (each reader moved a slider)."""
    rng = random.Random(seed)
    points, last = [], None
    while len(points) < count:
        batch = rng.choice([3, 4, 6, 8, 12, 16, 24, 32, 48, 64])
        if batch == last:
            continue
        last = batch
        points.append({"batch_size": batch, "prompt_len": rng.choice([32, 64, 96]),
                       "new_tokens": rng.choice([16, 32]), "seed": rng.randrange(4)})
    return points


@contextmanager
def clocked(module, name: str, spent: dict, part: str):
    """Add the wall time of every call of module.name to spent[part] while inside."""
    original = getattr(module, name)

    def timed(*args, **kwargs):
        start = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            spent[part] += time.perf_counter() - start

    setattr(module, name, timed)
    try:
        yield
    finally:
        setattr(module, name, original)


def one_round(points: list[dict]) -> dict:
    spent = dict.fromkeys(PARTS, 0.0)
    with clocked(measure, "fit_kv", spent, "fit_kv"), \
            clocked(probe.Probe, "measure", spent, "probe"):
        start = time.perf_counter()
        for params in points:
            result = plain(run("sweep_point", params, lambda *_: None, lambda: False))
            spent["timed"] += (result["ttft_ms"] + sum(result["step_ms"])) / 1000
        wall = time.perf_counter() - start
    spent["other"] = wall - spent["timed"] - spent["fit_kv"] - spent["probe"]
    return {"wall_s": wall, "points_per_s": len(points) / wall, **spent}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    points = knob_points(args.points, args.seed)
    bench = Run("point_cost", args)
    split = isolate(None, None)  # the worker's cores and threads
    start = time.perf_counter()
    engines.engine_for("tiny")  # built and warmed once, as a worker's first knob point does
    probe.get_probe()
    print(f"engine built in {time.perf_counter() - start:.1f} s (once); pinned as the worker "
          f"is: {split.note}; {len(points)} knob points a round, batch sizes "
          f"{[p['batch_size'] for p in points[:12]]}...")
    fresh_s = probe.FRESH_S
    rates: dict[str, list[float]] = {"probe each": [], "probe reused": []}
    for r in range(args.rounds):
        for how, probe.FRESH_S in (("probe each", 0.0), ("probe reused", fresh_s)):
            probe.get_probe().last = None
            row = one_round(points)
            rates[how].append(row["points_per_s"])
            bench.round({"round": r, "probe": how, **row},
                        f"round {r} {how:<12}: {row['points_per_s']:5.2f} points/s "
                        f"({row['wall_s']:5.2f} s); "
                        + ", ".join(f"{part} {row[part]:5.2f} s "
                                    f"({row[part] / row['wall_s']:4.0%})" for part in PARTS))
    probe.FRESH_S = fresh_s
    each, reused = (statistics.median(v) for v in rates.values())
    print(f"median points/s: probe each {each:.2f}, probe reused {reused:.2f}, "
          f"ratio {reused / each:.3f}")
    pause = inside_a_pause(points[0])
    return bench.finish({"points_per_s": {"probe_each": each, "probe_reused": reused,
                                          "ratio": reused / each}, "inside_a_pause": pause})


def inside_a_pause(params: dict) -> dict:
    """A point run while the job using the engine is paused (worker.pause sets it aside): its
    seconds with its sibling engine, and what the model build it started before takes."""
    key = engines.engine_key(JOBS["sweep_point"].check(params))
    mine = engines.set_aside(key)
    try:
        start = time.perf_counter()
        run("sweep_point", params, lambda *_: None, lambda: False)
        inside = time.perf_counter() - start
    finally:
        engines.put_back(key, mine)
    engines._spares.clear()
    start = time.perf_counter()
    run_steps(engines._engine_steps(key))  # what a point inside a pause built before
    build = time.perf_counter() - start
    print(f"a point inside a pause: {inside:.2f} s with its sibling engine; the model build it "
          f"started before: {build:.2f} s", flush=True)
    return {"point_s": round(inside, 3), "build_s": round(build, 3)}



if __name__ == "__main__":
    sys.exit(main())
