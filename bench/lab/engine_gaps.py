"""Where the engine worker's wall time went in a class: computing jobs, waiting for the next one,
or waiting inside them. Reads the trace the service writes when $LLM_SPEED_TRACE names a file
(engine.lab.trace):

    LLM_SPEED_TRACE=gaps.trace python bench/lab/classroom.py --students 30
    python bench/lab/engine_gaps.py gaps.trace [--json out.json]

The worker's marks cut its time into stretches, each put in one place:
- in a job: "setup" (its parameters checked, its engine found or built), "probe" (the
  calibration probes before and after a timed job), "timed" (what the job measures, its pauses
  left out), "untimed" (a job that times nothing), "finish" (its result made plain and sent),
  "quiet" (a re-measure's wait for quiet cores), "pause" (the hand-over of a paused job);
- "next job" (idle while other jobs waited: the result on its way to the web process's
  dispatcher thread, the dispatcher's turn, the next job on its way back), split by the
  dispatcher's marks into "to dispatcher" (the worker's last message sent -> the dispatcher has
  it: the pipe, the thread's wake-up and its wait for the web process's interpreter lock),
  "dispatcher" (it handles that message, stores the result, picks and sends the next job) and
  "to worker" (sent -> the worker has it);
- "nothing queued" (idle, no job waiting).
Each place's wall seconds, its share of the window (the worker's first job received -> its last
job done), and the worker's CPU seconds in it (its main thread's: where torch computes with one
thread per core) are printed; wall minus CPU inside "timed" is what the jobs themselves wait
(a load test's arrivals, a blocked event send, another process on the engine's core).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from engine.lab.trace import read  # noqa: E402

WORKER_MARKS = {"idle", "recv", "quiet", "prepared", "probe0", "body", "probe1", "paused",
                "resumed", "done", "gap", "filled"}
AFTER = {"prepared": "untimed", "probe0": "timed", "body": "probe", "probe1": "finish",
         "quiet": "setup", "paused": "pause", "done": "finish", "idle": "idle",
         "gap": "gap: asking", "resumed": "timed", "filled": "timed"}


def worker_pid(marks: list[dict]) -> int:
    """The pid that made the most worker marks (a restarted worker's first life is left out)."""
    counts: dict[int, int] = defaultdict(int)
    for m in marks:
        if m["what"] in ("idle", "done"):
            counts[m["pid"]] += 1
    return max(counts, key=counts.get)


def split(marks: list[dict]) -> dict:
    pid = worker_pid(marks)
    mine = [m for m in marks if m["pid"] == pid and m["what"] in WORKER_MARKS]
    web = [m for m in marks if m["pid"] != pid]
    gots = [m for m in web if m["what"] == "got"]
    sends = {m["job"]: m for m in web if m["what"] == "send"}
    first = next(i for i, m in enumerate(mine) if m["what"] == "recv" and m.get("tag") == "run")
    last = max(i for i, m in enumerate(mine) if m["what"] == "done")
    mine = mine[first:last + 1]
    wall: dict[str, float] = defaultdict(float)
    cpu: dict[str, float] = defaultdict(float)
    gaps: list[float] = []  # each "next job" wait, s
    inside: list[str] = []  # "pause" or "gap": what the worker is in, innermost last
    kinds = {m["job"]: m["kind"] for m in mine if m["what"] == "done"}
    jobs: list[int] = []  # the jobs the worker is inside, innermost last
    by_kind: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])  # "timed": wall, CPU
    gi = 0
    for a, b in zip(mine, mine[1:]):
        dt, dc = b["t"] - a["t"], b["cpu"] - a["cpu"]
        what = a["what"]
        if what == "recv" and a.get("tag") == "run":
            jobs.append(a["job"])
        elif what == "done" and jobs:
            jobs.pop()
        if what in ("paused", "gap"):
            inside.append(what.replace("paused", "pause"))
        elif what in ("resumed", "filled") and inside:
            inside.pop()
        if what == "recv":
            state = {"run": "setup", "resume": "pause", "nofill": "gap: asking"}.get(
                a.get("tag"), "setup")
        else:
            state = AFTER[what]
        if state == "idle" and inside and inside[-1] == "gap":
            state = "gap: asking"
        place = state
        if state == "untimed" and b["what"] == "probe0":
            place = "probe"
        if state == "setup" and b["what"] == "quiet":
            place = "quiet"
        if state == "idle":
            while gi < len(gots) and gots[gi]["t"] < a["t"]:
                gi += 1
            got = gots[gi] if gi < len(gots) else None
            waited = got is not None and got["t"] <= b["t"] and (
                got.get("queued", 0) > 0 or got.get("tag") == "paused")
            if not waited:
                place = "nothing queued"
            else:
                gaps.append(dt)
                send = sends.get(b["job"]) if b.get("tag") == "run" else None
                if send is not None and got["t"] <= send["t"] <= b["t"]:
                    wall["next job: to dispatcher"] += got["t"] - a["t"]
                    wall["next job: dispatcher"] += send["t"] - got["t"]
                    wall["next job: to worker"] += b["t"] - send["t"]
                else:
                    wall["next job: resume or unsplit"] += dt
                place = "next job"
        wall[place] += dt
        cpu[place] += dc
        if place == "timed" and jobs:
            by_kind[kinds.get(jobs[-1], "?")][0] += dt
            by_kind[kinds.get(jobs[-1], "?")][1] += dc
    total = mine[-1]["t"] - mine[0]["t"]
    ended = sum(1 for m in mine if m["what"] == "done")
    return {"builds": builds([m for m in marks if m["pid"] == pid]), "window_s": total, "worker_cpu_s": mine[-1]["cpu"] - mine[0]["cpu"],
            "jobs_ended": ended, "wall_s": dict(wall), "cpu_s": dict(cpu),
            "timed_by_kind": dict(by_kind),
            "gap_fills": sum(1 for m in mine if m["what"] == "filled"),
            "next_job_waits": len(gaps),
            "next_job_wait_p50_ms": 1000 * statistics.median(gaps) if gaps else None,
            "next_job_wait_p95_ms": (1000 * statistics.quantiles(gaps, n=20)[-1]
                                     if len(gaps) > 1 else None)}


def builds(marks: list[dict]) -> dict:
    """The worker's engine builds (engine.lab.jobs.engines marks them): per key, the models
    built to the end and their seconds (every step, stopped ones too), siblings made, KV pool
    resizes, models dropped."""
    out: dict = {"by_key": {}, "step_s": 0.0, "siblings": 0, "sibling_s": 0.0, "resizes": 0,
                 "resize_s": 0.0, "dropped": []}
    for m in marks:
        what = m["what"]
        if what in ("built", "build step"):
            key = " ".join(str(v) for v in m["key"])
            row = out["by_key"].setdefault(key, {"built": 0, "s": 0.0, "warm_up_s": 0.0})
            if what == "built":
                row["built"] += 1
                row["warm_up_s"] += m["parts"].get("warm-up", 0.0)
                row["s"] += m["parts"].get("warm-up", 0.0)  # its other steps are marked each
                out["step_s"] += m["parts"].get("warm-up", 0.0)
            else:
                row["s"] += m["s"]
                out["step_s"] += m["s"]
        elif what == "sibling":
            out["siblings"] += 1
            out["sibling_s"] += m["s"]
        elif what == "resize":
            out["resizes"] += 1
            out["resize_s"] += m["s"]
        elif what == "evict":
            out["dropped"].append(" ".join(str(v) for v in m["key"]))
    return out


def report(s: dict) -> str:
    total = s["window_s"]
    lines = [f"engine worker, {total:.1f} s from its first job received to its last done, "
             f"{s['jobs_ended']} job ends; its CPU {s['worker_cpu_s']:.1f} s = "
             f"{s['worker_cpu_s'] / total:.2f} of its core"]
    order = ["setup", "probe", "timed", "untimed", "finish", "quiet", "pause", "gap: asking",
             "next job", "nothing queued"]
    for place in order + sorted(k for k in s["wall_s"] if k not in order):
        if place not in s["wall_s"]:
            continue
        w, c = s["wall_s"][place], s["cpu_s"].get(place)
        cpu_text = f", CPU {c:6.2f} s" if c is not None else ""
        lines.append(f"  {place:28s} {w:7.2f} s  {w / total:6.1%}{cpu_text}")
    lines.append("  timed, by the job's kind (wall / CPU s): " + ", ".join(
        f"{k} {w:.1f} / {c:.1f}" for k, (w, c) in sorted(s["timed_by_kind"].items(),
                                                        key=lambda kv: -kv[1][0])))
    lines.append(f"  gaps lent (a point asked for in a run's idle time): {s['gap_fills']}")
    b = s["builds"]
    if b["by_key"] or b["siblings"] or b["resizes"]:
        lines.append(f"  model builds {b['step_s']:.2f} s ({b['step_s'] / total:.1%}): " + "; ".join(
            f"{k}: {r['built']} built, {r['s']:.2f} s (warm-up {r['warm_up_s']:.2f})"
            for k, r in b["by_key"].items()))
        lines.append(f"  siblings made {b['siblings']} ({b['sibling_s']:.2f} s), KV pools "
                     f"resized {b['resizes']} ({b['resize_s']:.2f} s), models dropped "
                     f"{len(b['dropped'])}: {', '.join(b['dropped']) or '-'}")
    if s["next_job_waits"]:
        lines.append(f"  next-job waits: {s['next_job_waits']}, p50 {s['next_job_wait_p50_ms']:.1f}"
                     f" ms, p95 {s['next_job_wait_p95_ms'] or 0:.1f} ms")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace")
    parser.add_argument("--json")
    args = parser.parse_args()
    s = split(read(args.trace))
    print(report(s))
    if args.json:
        Path(args.json).write_text(json.dumps(s, indent=1))


if __name__ == "__main__":
    main()
