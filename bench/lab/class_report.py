"""The class bench's report: percentiles of what the readers saw, the targets met or missed,
the printed summary and the JSON result (bench/lab/classroom.py)."""

from __future__ import annotations

import json

from bench.harness import Run
from bench.lab.class_readers import MIX
from bench.lab.class_server import CPU_GROUPS, ENGINE_COUNTS, RESULTS, exceptions_logged, rounded
from bench.lab.proc_cpu import windows
from bench.web.served_app import ROOT

TARGETS = {"first_number_p95_s": 10.0, "release_to_drawn_p95_s": 5.0, "rss_after_within": 0.20}


def percentile(values: list[float], q: float) -> float | None:
    """The q-th percentile (0-100), linear between ranks; None for no values."""
    if not values:
        return None
    values = sorted(values)
    k = (len(values) - 1) * q / 100
    lo, hi = int(k), min(int(k) + 1, len(values) - 1)
    return values[lo] + (values[hi] - values[lo]) * (k - lo)


def summary(values: list[float], digits: int = 2) -> dict:
    return {"n": len(values), "p50_s": rounded(percentile(values, 50), digits),
            "p95_s": rounded(percentile(values, 95), digits),
            "max_s": rounded(max(values, default=None), digits)}


def report(args, kind: str, students, students_cpu: float | None, lags: list, probes, queue,
           rss, bench: Run, log, clients_on: str, cpu: list[dict],
           warm_errors: list[str]) -> int:
    first = [s.first_number_s for s in students if s.first_number_s is not None]
    full = [s.first_result_s for s in students if s.first_result_s is not None]
    knob = [r["drawn_s"] for s in students for r in s.releases if r["kind"] == "point"]
    other = [r["drawn_s"] for s in students for r in s.releases if r["kind"] == "shown"]
    probe_first = [p["first_number_s"] for p in probes if p["first_number_s"] is not None]
    probe_knob = [p["release_to_drawn_s"] for p in probes if p["release_to_drawn_s"] is not None]
    arrivals_first = first + probe_first
    releases = knob + probe_knob
    after = rss.get("after", {})
    growth = {base: (after["web_mib"] / rss[base]["web_mib"] - 1
                     if rss.get(base, {}).get("web_mib") and after.get("web_mib") else None)
              for base in ("cold", "warm")}
    first_p95 = percentile(arrivals_first, 95)
    release_p95 = percentile(releases, 95)
    inf = float("inf")  # a figure never measured misses its target
    bench.target("first number p95 s, every new reader",
                 first_p95 if first_p95 is not None else inf,
                 at_most=TARGETS["first_number_p95_s"])
    bench.target("new readers who never saw a number",
                 len(students) + len(probes) - len(arrivals_first), at_most=0)
    bench.target("knob release to point drawn p95 s",
                 release_p95 if release_p95 is not None else inf,
                 at_most=TARGETS["release_to_drawn_p95_s"])
    for base, g in growth.items():
        bench.target(f"web RSS after the class over {base}", g if g is not None else inf,
                     at_most=TARGETS["rss_after_within"])
    pulled = [s for s in students if s.pulled_s is not None]
    result = {
        "students": args.students, "arrive_s": args.arrive_s,
        "class_s": args.class_s, "probe_every_s": args.probe_every, "seed": args.seed,
        "clients_on": clients_on, "student_kind": kind, "server_env": args.server_env,
        "first_number": {"all_new_readers": summary(arrivals_first),
                         "students": summary(first), "chromium": summary(probe_first),
                         "never": [s.slug for s in students if s.first_number_s is None]},
        "first_full_result": {"students": summary(full),
                              "never": [s.slug for s in students if s.first_result_s is None]},
        "release_to_drawn": {"knob_all": summary(releases), "knob_students": summary(knob),
                             "knob_chromium": summary(probe_knob),
                             "other_lessons_result_shown": summary(other),
                             "not_drawn": sum(s._pending is not None for s in students)},
        "first_number_by_lesson": {slug: summary([s.first_number_s for s in students
                                                  if s.slug == slug and s.first_number_s])
                                   for slug in MIX},
        "arrival_timeline": arrival_timeline(students),
        "students_loop_late": summary([lag for t, lag in lags], 3),
        "students_cpu": {
            "pull_cpu": summary([s.pull_cpu_s for s in pulled if s.pull_cpu_s is not None], 4),
            "visit_cpu": summary([s.cpu_s for s in pulled if s.cpu_s is not None], 4),
            "all_students_s": rounded(students_cpu, 3),
            "per_page_s": rounded(students_cpu / len(pulled) if pulled and students_cpu else None,
                                 4)},
        "cpu_share_every_5_s": windows(cpu, CPU_GROUPS + _cores(cpu), 5.0, args.class_s + 30),
        "cpu_samples": cpu,
        "student_timelines": [
            {"n": s.n, "lesson": s.slug, "session_id": s.session_id,
             "opened_unix": round(s.opened_unix, 3),
             **{k: rounded(getattr(s, k)) for k in ("pulled_s", "pull_cpu_s", "ready_s",
                                                   "skip_s", "first_number_s",
                                                   "first_result_s")}}
            for s in students],
        "queue": queue, "queue_max": max((q["queued"] or 0 for q in queue), default=0),
        "engine_counts": engine_counts(queue),
        "rss_mib": rss, "web_rss_growth": {k: rounded(g) for k, g in growth.items()},
        "errors": [f"{s.slug}: {s.error}" for s in students if s.error] + warm_errors,
        "probes": probes,
        "server_log_tracebacks": exceptions_logged(log),
    }
    out = RESULTS / f"classroom-{args.students}{'-bokeh' if args.bokeh_clients else ''}.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"classroom: {args.students} students ({kind}) over {args.arrive_s:g} s, class "
          f"{args.class_s:g} s, {len(probes)} Chromium arrivals; students and Chromium on "
          f"{clients_on}"
          + (f"; server environment also {' '.join(args.server_env)}" if args.server_env else ""))
    for what, s in [("first number, every new reader", result["first_number"]["all_new_readers"]),
                    ("first number, students", result["first_number"]["students"]),
                    ("first number, Chromium", result["first_number"]["chromium"]),
                    ("first full result, students", result["first_full_result"]["students"]),
                    ("knob release to point drawn", result["release_to_drawn"]["knob_all"]),
                    ("other slider release to result", other and summary(other) or summary([]))]:
        print(f"  {what:<34} n={s['n']:<4} p50 {s['p50_s']} s  p95 {s['p95_s']} s  "
              f"max {s['max_s']} s")
    print("  first number by lesson: " + ", ".join(
        f"{k} p95 {v['p95_s']} s (n={v['n']})" for k, v in result["first_number_by_lesson"].items()))
    print("  queue length (every 5 s): " + " ".join(
        str(q["queued"]) for q in queue[::5]) + f"; max {result['queue_max']}")
    timeline = result["arrival_timeline"]
    print("  arrival timeline, students (s after opening, p50 / p95): " + ", ".join(
        f"{k} {v['p50_s']} / {v['p95_s']}" for k, v in timeline.items()))
    cost = result["students_cpu"]
    print(f"  students' own CPU, s per page: receiving it p50 {cost['pull_cpu']['p50_s']} / p95 "
          f"{cost['pull_cpu']['p95_s']}, the whole visit p50 {cost['visit_cpu']['p50_s']} / p95 "
          f"{cost['visit_cpu']['p95_s']}; all the students' threads {cost['all_students_s']} s "
          f"= {cost['per_page_s']} s per page")
    late = result["students_loop_late"]
    if late["n"]:
        print(f"  the students' loop, late by (its 0.1 s timer): p50 {late['p50_s']} s, p95 "
              f"{late['p95_s']} s, max {late['max_s']} s")
    print("  share of a core used, every 5 s (web / worker / students / chromium; each core "
          "busy):")
    for w in result["cpu_share_every_5_s"]:
        print(f"    {w['from_s']:>5.0f}-{w['to_s']:<4.0f} s  " + " / ".join(
            f"{w[g]:.2f}" for g in CPU_GROUPS) + "   " + " ".join(
            f"{c} {w[c]}" for c in _cores(cpu)))
    print("  engine: " + ", ".join(f"{k} {v}" for k, v in result["engine_counts"].items())
          + "; seconds running, by kind (samples): " + ", ".join(
              f"{kind} {n}" for kind, n in running_by_kind(queue).items()))
    cold, warm = rss.get("cold", {}), rss.get("warm", {})
    print(f"  server start: /app answered {rss.get('start_s', {}).get('app_answered')} s, engine "
          f"ready {rss.get('start_s', {}).get('engine_ready')} s after launch")
    print(f"  RSS MiB web / worker: cold {cold.get('web_mib')} / {cold.get('worker_mib')} "
          f"({cold.get('when')}), warm "
          f"{warm.get('web_mib')} / {warm.get('worker_mib')} ({warm.get('when')}), during max "
          f"{rss.get('during_max', {}).get('web_mib')} / "
          f"{rss.get('during_max', {}).get('worker_mib')}, after {after.get('web_mib')} / "
          f"{after.get('worker_mib')} ({after.get('when')}); web after vs cold "
          f"{pct(growth['cold'])}, vs warm {pct(growth['warm'])}")
    print(f"  errors: {len(result['errors'])}; server log tracebacks: "
          f"{result['server_log_tracebacks']}; never showed a number: "
          f"{result['first_number']['never']}")
    print(f"  saved {out.relative_to(ROOT)}")
    bulky = ("cpu_samples", "student_timelines", "queue", "probes", "arrival_timeline")
    return bench.finish(result, log={k: v for k, v in result.items() if k not in bulky})


def arrival_timeline(students: list) -> dict:
    """Where a student's wait for its first number went: the page received (pulled; pull_cpu is
    the student's own CPU seconds in it), the ready event and the skip sent, the first number;
    each as seconds after opening."""
    steps = {"pulled": "pulled_s", "pull_cpu": "pull_cpu_s", "ready_sent": "ready_s",
             "skip_sent": "skip_s", "first_number": "first_number_s"}
    out = {name: summary([getattr(s, a) for s in students if getattr(s, a) is not None],
                         4 if name == "pull_cpu" else 2)
           for name, a in steps.items()}
    out["skip_to_number"] = summary([s.first_number_s - s.skip_s for s in students
                                     if s.first_number_s is not None and s.skip_s is not None])
    return out


def engine_counts(queue: list[dict]) -> dict:
    """The service's counters (ENGINE_COUNTS) at its last answered sample: what the engine did
    over the whole class, points run in lent gaps among them."""
    last = next((q for q in reversed(queue) if q.get("jobs_done") is not None), {})
    return {k: last.get(k) for k in ENGINE_COUNTS}


def _cores(cpu: list[dict]) -> list[str]:
    return sorted({k for s in cpu for k in s if k.startswith("core")})


def running_by_kind(queue: list[dict]) -> dict[str, int]:
    """How many of the once-a-second samples found each job kind running, most first."""
    counts: dict[str, int] = {}
    for q in queue:
        if q.get("running_kind"):
            counts[q["running_kind"]] = counts.get(q["running_kind"], 0) + 1
    return dict(sorted(counts.items(), key=lambda kv: -kv[1]))


def pct(x: float | None) -> str:
    return "?" if x is None else f"{100 * x:+.0f}%"

