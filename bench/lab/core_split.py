"""Which core split gives trustworthy numbers: the engine on cores of its own (ENGINE_CORES=auto,
1 + 1 on two cores) against the engine and the web process sharing every core (off).

For each split and round, starts the engine service with that split (its worker pinned as the
app's is) and measures the knob's sweep points (tiny preset, the page's settings: 128-token
prompts, 32 new tokens) at each batch size, twice: with the web process quiet, and with a
simulated web load (a thread of this process doing Python work, JSON encoding and decoding, for
--web-load of every 50 ms frame, as the web server does serializing page updates; pinned to the
web's cores where the split has them). Each point's median decode step, its p90/p50, the
disturbance check's verdict, the share of its CPU time the engine waited for a core, and the
calibration probe before and after it against the machine's profile are printed per round.
Before each group of points it waits (at most 20 s) for the machine to be quiet, and says
whether it was.

The verdict compares, per batch size, the medians over rounds: a split is trustworthy when its
points under web load stay within the knob's tolerance (1.25x) of the same split's quiet points
and are not labelled disturbed. Prints every round, a table and the harness's JSON result
(bench/harness.py: the load average before and after, the log line).

    python bench/lab/core_split.py [--rounds 3] [--batch-sizes 1,8,64] [--web-load 0.5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.harness import Run  # noqa: E402
from engine.lab import cores, quality  # noqa: E402
from engine.lab.client import EngineService  # noqa: E402

SPLITS = ("auto", "off")
FRAME_S = 0.05
TOLERANCE = 1.25
TIMEOUT_S = 300
QUIET_WAIT_S = 20.0  # before each group of points, wait at most this long for a quiet machine


class WebLoad:
    """A thread doing Python work for `duty` of every frame, pinned to `on_cores`."""

    def __init__(self, duty: float, on_cores):
        self.duty, self.cores = duty, set(on_cores)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.frames = 0

    def __enter__(self):
        if self.duty > 0:
            self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def _run(self) -> None:
        os.sched_setaffinity(0, self.cores)  # this thread only
        payload = {"x": list(range(2000)), "y": [i * 0.5 for i in range(2000)], "t": "tok" * 50}
        while not self._stop.is_set():
            start = time.perf_counter()
            while time.perf_counter() - start < self.duty * FRAME_S:
                json.loads(json.dumps(payload))
            self.frames += 1
            self._stop.wait(max(0.0, FRAME_S - (time.perf_counter() - start)))


def wait_ready(svc: EngineService) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while not svc.status()["ready"]:
        if time.monotonic() > deadline or svc.status()["start_error"]:
            raise RuntimeError(f"the engine did not start: {svc.status()['start_error']}")
        time.sleep(0.05)


def measure(svc: EngineService, batch: int) -> dict:
    job = svc.submit("sweep_point", {"preset": "tiny", "batch_size": batch}, use_cache=False)
    if not job.wait(TIMEOUT_S) or job.state != "done":
        raise RuntimeError(f"batch {batch}: {job.state} {job.error}")
    r = job.record
    c = r.check
    return {"batch": batch, "step_ms": r.tpot_ms, "p10": r.spread.p10, "p90": r.spread.p90,
            "p90_over_p50": r.spread.p90 / r.spread.p50, "disturbed": c.disturbed,
            "wait_share": (c.wait_s + c.steal_s) / max(c.cpu_s, 1e-9),
            "others_cpu_s": c.others_cpu_s, "probe_before_ms": c.probe_before_ms,
            "probe_after_ms": c.probe_after_ms, "probe_profile_ms": c.probe_profile_ms,
            "reasons": c.reasons}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batch-sizes", default="1,8,64")
    parser.add_argument("--web-load", type=float, default=0.5,
                        help="share of each 50 ms frame the simulated web server works")
    args = parser.parse_args(argv)
    batches = [int(b) for b in args.batch_sizes.split(",")]
    available = cores.available_cores()
    bench = Run("core_split", args)
    rows = bench.rounds
    with tempfile.TemporaryDirectory() as cache:
        os.environ["LLM_SPEED_CACHE"] = cache  # the worker's probe profile, hardware limits
        for rnd in range(1, args.rounds + 1):
            for setting in SPLITS:
                split = cores.plan(available, setting)
                svc = EngineService(cache_path=Path(cache) / "results", core_setting=setting,
                                    remeasures=0)
                try:
                    wait_ready(svc)
                    threads = svc.status()["threads"]
                    for duty in (0.0, args.web_load):
                        quiet, share = quality.wait_until_quiet(available, QUIET_WAIT_S)
                        print(f"machine {'quiet' if quiet else 'BUSY'} before the points "
                              f"(others use {share:.0%} of its cores)", flush=True)
                        with WebLoad(duty, split.web):
                            for batch in batches:
                                row = {"round": rnd, "split": setting, "engine_cores":
                                       list(split.engine), "threads": threads, "web_load": duty,
                                       **measure(svc, batch)}
                                bench.round(row, f"round {rnd} split {setting:4} (engine {cores.describe(split.engine)}, "
                                      f"{threads} threads) web load {duty:.0%} batch {batch:3}: "
                                      f"step {row['step_ms']:7.2f} ms  p90/p50 "
                                      f"{row['p90_over_p50']:.2f}  waited {row['wait_share']:5.1%}  "
                                      f"probe {row['probe_before_ms']:.1f}/{row['probe_after_ms']:.1f}"
                                      f" (profile {row['probe_profile_ms']:.1f}) ms  "
                                      f"{'DISTURBED' if row['disturbed'] else 'quiet'}")
                finally:
                    svc.shutdown()

    summary = []
    print("\nmedians over rounds: step ms (disturbed points / all)")
    print(f"{'split':5} {'batch':>5} {'quiet':>9} {'web load':>9} {'load/quiet':>10} "
          f"{'disturbed':>10}")
    for setting in SPLITS:
        for batch in batches:
            def pick(duty, s=setting, b=batch):
                return [r for r in rows if r["split"] == s and r["batch"] == b
                        and r["web_load"] == duty]
            quiet, loaded = pick(0.0), pick(args.web_load)
            q = statistics.median(r["step_ms"] for r in quiet)
            ld = statistics.median(r["step_ms"] for r in loaded)
            dist = sum(r["disturbed"] for r in loaded)
            ok = ld / q <= TOLERANCE and dist == 0
            summary.append({"split": setting, "batch": batch, "quiet_ms": q, "loaded_ms": ld,
                            "loaded_over_quiet": ld / q, "disturbed_under_load": dist,
                            "of": len(loaded), "trustworthy": ok})
            print(f"{setting:5} {batch:5} {q:9.2f} {ld:9.2f} {ld / q:10.2f} "
                  f"{dist:>6}/{len(loaded)}  {'ok' if ok else 'NOT trustworthy'}")
    for batch in batches:
        a = next(s for s in summary if s["split"] == "auto" and s["batch"] == batch)
        o = next(s for s in summary if s["split"] == "off" and s["batch"] == batch)
        print(f"batch {batch}: quiet, sharing every core is {a['quiet_ms'] / o['quiet_ms']:.2f}x "
              f"faster than 1 + 1; under web load {a['loaded_ms'] / o['loaded_ms']:.2f}x")
    return bench.finish({"available_cores": list(available), "web_load": args.web_load,
                         "summary": summary})


if __name__ == "__main__":
    sys.exit(main())
