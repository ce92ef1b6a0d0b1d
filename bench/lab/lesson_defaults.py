"""Do the demos make their point at their default settings?

Each round measures, fresh (not from the cache), the jobs each of four lessons runs at its
default settings (the lesson's own warm_jobs: what a reader's first visit runs), on the engine
service as the app starts it (the worker on its own core), with no re-measuring: every result
is shown as it came, with its disturbance check. Then it asks each lesson's question of them,
with the lesson's own code where the page has it:
  lesson 2: the load test's E2E P99 is above its P50;
  lesson 3: continuous batching's throughput (output tokens/s) is above static batching's;
  lesson 4: total tokens/s does not fall from one doubling to the next beyond the two points'
            own spread (the page's doubling readout: a fall within it is levelling off);
  lesson 7: prefilling the long prompt in chunks cuts the worst gap between the running
            requests' tokens by at least 3x (the page's own worst gaps);
  lesson 12: the plan from lesson 4's points (the page's default demand and targets) holds in
            the page's own check (a load test of one replica's share: 95% of requests within
            both targets); then lesson 8's sweep at the planned batch limit (its defaults) is
            measured too, the plan redone with it as the page does, and checked again if its
            replicas changed. Each stage's seconds are printed (the page's waits).
A round whose results were disturbed says so; the summary counts, per lesson, the rounds that
made the point among the undisturbed ones. Prints every round and the harness's JSON result
(bench/harness.py: the load average before and after, the log line).

    python bench/lab/lesson_defaults.py [--rounds 3] [--lessons 2,3,4,7,12]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.harness import Run  # noqa: E402
from bench.lab.core_split import wait_ready  # noqa: E402
from engine.calc.deployment import measured_rate, plan  # noqa: E402
from engine.lab.client import EngineService  # noqa: E402
from lessons.average_lies import AverageLiesLesson  # noqa: E402
from lessons.capacity import CapacityLesson  # noqa: E402
from lessons.capacity_findings import check_verdict, points_from  # noqa: E402
from lessons.chunked_prefill import CHUNKED, WHOLE, ChunkedPrefillLesson  # noqa: E402
from lessons.knob import KnobLesson  # noqa: E402
from lessons.knob_findings import doubling, point_of  # noqa: E402
from lessons.slo_goodput import SLOGoodputLesson  # noqa: E402
from lessons.three_schedules import ThreeSchedulesLesson, policy_summary  # noqa: E402

TIMEOUT_S = 600
CHUNK_TARGET = 3.0  # lesson 7: worst gap whole / chunked


def measure(svc: EngineService, kind: str, params: dict):
    """The job's typed record, measured fresh; raises if it did not finish."""
    job = svc.submit(kind, params, use_cache=False)
    if not job.wait(TIMEOUT_S) or job.state != "done":
        raise RuntimeError(f"{kind} {params}: {job.state} {job.error}")
    return job.record


def disturbed(records) -> list[str]:
    return ["; ".join(r.check.reasons) for r in records
            if r.check is not None and r.check.disturbed]


def lesson_2(svc: EngineService) -> dict:
    (kind, params), = AverageLiesLesson.warm_jobs()
    r = measure(svc, kind, params)
    e2e = r.metrics.e2e_ms
    return {"p50_ms": e2e.p50, "p99_ms": e2e.p99, "made": e2e.p99 > e2e.p50,
            "disturbed": disturbed([r]),
            "text": f"E2E P50 {e2e.p50:.0f} ms, P99 {e2e.p99:.0f} ms"}


def lesson_3(svc: EngineService) -> dict:
    runs = {params["policy"]: measure(svc, kind, params)
            for kind, params in ThreeSchedulesLesson.warm_jobs()}
    tput = {policy: policy_summary(r).throughput for policy, r in runs.items()}
    return {"tokens_per_s": tput, "made": tput["continuous"] > tput["static"],
            "continuous_over_static": tput["continuous"] / tput["static"],
            "disturbed": disturbed(runs.values()),
            "text": ", ".join(f"{p} {t:,.0f}" for p, t in tput.items()) + " tokens/s "
                    f"(continuous / static {tput['continuous'] / tput['static']:.2f})"}


def lesson_4(svc: EngineService) -> dict:
    records = [measure(svc, kind, params) for kind, params in KnobLesson.warm_jobs()]
    points = {r.batch_size: point_of(r) for r in records}
    batches = sorted(points)
    falls = []  # doublings whose total tokens/s fell beyond both points' spread
    for half, batch in zip(batches, batches[1:], strict=False):
        a, b = points[half], points[batch]
        if b.tokens_per_s < a.tokens_per_s and "levelled off" not in doubling(points, batch):
            falls.append(f"{half} to {batch}: {a.tokens_per_s:,.0f} -> {b.tokens_per_s:,.0f}")
    return {"tokens_per_s": {b: points[b].tokens_per_s for b in batches},
            "spread": {b: points[b].tokens_per_s_range() for b in batches},
            "falls": falls, "made": not falls, "disturbed": disturbed(records),
            "text": " ".join(f"b{b} {points[b].tokens_per_s:,.0f}" for b in batches)
                    + " tokens/s" + (f"; FELL {', '.join(falls)}" if falls else "")}


def lesson_7(svc: EngineService) -> dict:
    page = ChunkedPrefillLesson()  # its own worst gaps: the long request's tokens left out
    records = []
    for (kind, params), series in zip(ChunkedPrefillLesson.warm_jobs(), (WHOLE, CHUNKED),
                                      strict=True):
        records.append(measure(svc, kind, params))
        page.show_run(series, params["chunk_size"], records[-1])
    whole, chunked = page.results[WHOLE].worst_ms, page.results[CHUNKED].worst_ms
    return {"worst_whole_ms": whole, "worst_chunked_ms": chunked, "ratio": whole / chunked,
            "made": whole / chunked >= CHUNK_TARGET, "disturbed": disturbed(records),
            "text": f"worst gap whole {whole:.0f} ms, chunked {chunked:.0f} ms = "
                    f"{whole / chunked:.2f}x (target >= {CHUNK_TARGET:g}x)"}


def timed(svc: EngineService, jobs: list[tuple[str, dict]]) -> tuple[list, float]:
    start = time.monotonic()
    return [measure(svc, kind, params) for kind, params in jobs], time.monotonic() - start


def lesson_12(svc: EngineService) -> dict:
    page = CapacityLesson()  # its default demand and targets
    demand, targets = page.demand(), page.targets()
    records, points_s = timed(svc, CapacityLesson.warm_jobs())
    points = points_from({r.batch_size: r for r in records})
    first = plan(points, demand, targets)
    if not first.feasible:
        return {"made": False, "disturbed": disturbed(records), "seconds_points": points_s,
                "text": f"no plan ({first.why}); points {points_s:.0f} s"}
    [run], check_s = timed(svc, [("load_test", page.check_params(first))])
    held, words = check_verdict(run, targets)
    text = (f"plan {first.replicas} replica(s) at batch {first.batch} (one replica "
            f"{first.replica_rps:.3g} requests/s by Little's law, each asked for "
            f"{first.per_replica_rate:.3g}); points {points_s:.0f} s, check {check_s:.0f} s: "
            + words.replace("**", ""))
    row = {"batch": first.batch, "replicas": first.replicas, "replica_rps": first.replica_rps,
           "check_rate": run.workload.rate, "held": held, "seconds_points": points_s,
           "seconds_check": check_s}
    # lesson 8's sweep of the planned batch limit, read by the page once the reader ran it
    [sweep], sweep_s = timed(svc, [("rate_sweep",
                                    SLOGoodputLesson.default_sweep_params(first.batch))])
    m = measured_rate(sweep, targets)
    second = plan(points, demand, targets, measured={first.batch: m} if m else None)
    runs = [*records, run, sweep]
    text += (f" | lesson 8's sweep at batch limit {first.batch} ({sweep_s:.0f} s): "
             + (f"up to {m.rate_rps:g} requests/s within the targets, {m.output_tok_s:.4g} "
                f"output tokens/s there, {second.replicas_from_load} replica(s) by it"
                if m else "no rate within the targets"))
    row.update(sweep_rate=m.rate_rps if m else None, replicas_with_8=second.replicas,
               seconds_sweep=sweep_s)
    if second.replicas != first.replicas:
        [again], again_s = timed(svc, [("load_test", page.check_params(second))])
        held2, words2 = check_verdict(again, targets)
        runs.append(again)
        text += f"; plan now {second.replicas} replica(s), check {again_s:.0f} s: " \
                + words2.replace("**", "")
        row.update(held_with_8=held2, seconds_check_with_8=again_s)
        held = held and held2
    return {**row, "made": held, "disturbed": disturbed(runs), "text": text}


LESSONS = {2: lesson_2, 3: lesson_3, 4: lesson_4, 7: lesson_7, 12: lesson_12}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--lessons", default="2,3,4,7,12")
    args = parser.parse_args(argv)
    chosen = [int(n) for n in args.lessons.split(",")]
    unknown = [n for n in chosen if n not in LESSONS]
    if unknown:
        parser.error(f"no check for lesson(s) {unknown}: choose from {sorted(LESSONS)}")
    bench = Run("lesson_defaults", args)
    rows = bench.rounds
    with tempfile.TemporaryDirectory() as cache:
        os.environ["LLM_SPEED_CACHE"] = cache  # the worker's probe profile, hardware limits
        svc = EngineService(cache_path=Path(cache) / "results", remeasures=0)
        try:
            wait_ready(svc)
            print(f"engine on cores {svc.status()['cores']}, "
                  f"{svc.status()['threads']} threads", flush=True)
            for rnd in range(1, args.rounds + 1):
                for n in chosen:
                    start = time.monotonic()
                    row = {"round": rnd, "lesson": n, **LESSONS[n](svc),
                           "seconds": time.monotonic() - start}
                    bench.round(row, f"round {rnd} lesson {n}: {row['text']}: "
                          f"{'made its point' if row['made'] else 'did NOT make its point'}; "
                          + (f"DISTURBED ({' / '.join(row['disturbed'])})" if row["disturbed"]
                             else "quiet") + f"; {row['seconds']:.0f} s")
        finally:
            svc.shutdown()
    summary = {}
    print("\nper lesson: rounds that made the point, of the undisturbed rounds (and of all)")
    for n in chosen:
        mine = [r for r in rows if r["lesson"] == n]
        quiet = [r for r in mine if not r["disturbed"]]
        summary[n] = {"made_quiet": sum(r["made"] for r in quiet), "quiet": len(quiet),
                      "made_all": sum(r["made"] for r in mine), "all": len(mine)}
        s = summary[n]
        print(f"lesson {n}: {s['made_quiet']} of {s['quiet']} undisturbed rounds "
              f"({s['made_all']} of {s['all']} in all)")
        bench.target(f"lesson {n}: share of its undisturbed rounds that made the point",
                     s["made_quiet"] / s["quiet"] if s["quiet"] else 0.0, at_least=1.0)
    return bench.finish({"summary": summary})


if __name__ == "__main__":
    sys.exit(main())
