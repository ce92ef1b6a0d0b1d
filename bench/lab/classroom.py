"""A class on one machine: N students on the served app, from an empty measurement cache.

    python bench/lab/classroom.py [--students 30] [--arrive-s 30] [--class-s 90] [--seed 0]
                                  [--bokeh-clients]
    python bench/lab/classroom.py --churn 500 [--at-once 10]
    python bench/lab/classroom.py --class-mode [--students 30] [--seconds 60]

(--class-mode: the students' own requests as the load of one class run, through the engine
service: bench/lab/class_mode.py says what it measures.)

Starts `panel serve app.py` (the README's command) on 127.0.0.1 with an empty cache, then:
(The cache directory holds no result; the C++ kernels are built into it first and the lessons'
models' matrix-product plans timed, as the README's class set-up does (`python -m lessons.warm`
runs `python -m engine build-kernel`, then `python -m engine tune`): a build or a plan is the
machine's, not a measurement. `--no-kernels` builds and times nothing: plain torch attention and
torch products, the plans timed by the worker during the class.)
- N lightweight students (bench/lab/students.py), each a websocket speaking the Bokeh server's
  protocol as a browser's BokehJS does, reading the page and its changes as JSON without
  building Bokeh models, all on one asyncio loop: the load a class's browsers put on the server,
  at a few ms of the bench's CPU per page received. Each sends the browser's "document ready"
  event, so the lesson starts its measurements as in a browser. --bokeh-clients makes each
  student a Bokeh client session instead (bokeh.client.pull_session, a thread each, rebuilding
  every page and every patch as Bokeh models, which costs the web server's core far more), for
  comparison (bench/results/classroom-<N>-bokeh.json). They arrive evenly over --arrive-s
  seconds, each on a lesson of MIX with settings of its own (its URL). Every lesson measures
  nothing fresh before its reader predicts or skips (lessons.base): each student skips at once
  ("Skip the prediction and measure"), so the figures below leave out a reader's own thinking
  time. While the class lasts each moves one of its lesson's sliders every 10-25 s (setting the
  slider's value and sending the released value, as a mouse release does).
- one real reader, Chromium driven by Playwright (/usr/bin/chromium, headless): every
  --probe-every seconds a new page (a newly arriving reader) on the next lesson of PROBE_LESSONS,
  skipping its prediction once the button is there; on the knob it also releases the slider at a
  batch nobody asked for. It runs in a thread of its own, so its waits hold up no student.
The students and Chromium keep to the web server's cores, off the engine's (keep_off_engine_cores;
--clients-anywhere lets them run anywhere): a class's browsers are on other machines. Chromium
runs at nice 19, its scheduler groups too (proc_cpu.lowest_priority_sessions: Playwright starts
it in sessions of its own, and Linux's autogroups share a core between groups as equals), so it
takes only the web core's idle time.
Before the class the web server's memory is sampled cold (the server started with --warm, as the
README's class command: every page built once at start-up) and warm: every page of MIX and
PROBE_LESSONS opened once without the ready event (nothing measured) and closed; each sample
once the server's trim after the closed sessions has run (after_trim), as the "after" is.
It prints every sample and the harness's JSON result (bench/harness.py; the full result also in
bench/results/classroom-<N>.json):
- time to first number for a newly arriving reader: from opening the page to the first measured
  number on it (the status line's "measured live" / "cached: measured" / "nearby", or a run's
  partial "measured live so far" figure while it goes on), p50 and p95, for the students and for
  the Chromium reader apart; and, for the students, the time to the first full result (a
  partial figure left out);
- slider release to point drawn on the knob (the point in the chart's data), p95; and release to
  the new result shown on the other lessons;
- the engine queue's length over time and what the worker runs (the app's /engine-status, once
  a second), with its counts of runs, cache answers, disturbed results and points run in a
  running job's lent idle gaps (gap_fills); the server log
  (bench/results/classroom-<N>-server.log) has a line per measured run with its time;
- resident memory (RSS) of the web process and the engine worker before the class (cold and
  warm, above), the most during it, and after every session has closed and the server has
  trimmed after them (as --churn below);
- where a student's wait went (p50 / p95 seconds after opening): its page received (the server
  built and serialized it, the student read it), the ready event and the skip sent, the first
  number; what the students cost: each one's own CPU to read its page and over its visit, the
  students' thread's CPU per student, and how late the students' loop ran (a late loop would be
  the bench measuring itself); and, every 5 s, the share of a core used by the web server, the
  worker, this process (the students) and Chromium, and each core's busy share
  (bench/lab/proc_cpu.py, from /proc), so a slow arrival can be told apart as the server's own
  work, the load generator's or the engine's.
Targets (N = 30 on 2 cores, empty cache): first number p95 <= 10 s, release to drawn p95
<= 5 s, web RSS after within 20% of before.

--churn N: memory only. N readers open a page (every lesson, the about page and the course map in
turn, --at-once at a time), wait for its first number (at most 5 s) and leave; the web process's
RSS is printed at the start, after a first round over every page (its modules imported: the
baseline), every 50 readers (just after they left: their memory not yet returned), and at the
end. The baseline and the end are both taken once the server has discarded the closed sessions
and run the memory trim that follows (widgets.runtime.heap, TRIM_AFTER_S later; /engine-status's
"web_heap" says when none is pending): both with no session open, after the same cleanup.
Target: the end within 20% of the server's start (sampled once its start-up trim has run).
Bounded: every wait has a timeout, the whole run stops after arrive + class + 120 s whatever
happens, and the server is stopped at the end.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: engine, bench

from bench.harness import Run  # noqa: E402
from bench.lab.class_readers import (  # noqa: E402
    MIX,
    WAIT_S,
    Cohort,
    chromium_readers,
    students_and_chromium,
    visit,
    warm_up,
)
from bench.lab.class_report import TARGETS, pct, report  # noqa: E402
from bench.lab.class_server import (  # noqa: E402
    ENGINE_COUNTS,
    RESULTS,
    after_trim,
    cpu_groups,
    engine_status,
    exceptions_logged,
    fresh_cache,
    keep_off_engine_cores,
    memory,
    rounded,
)
from bench.lab.proc_cpu import CpuSampler  # noqa: E402
from bench.web.served_app import ROOT, child_pids, start_server, stop_server  # noqa: E402

GRACE_S = 120.0  # after the class: for the last results, the sessions to close, memory to settle
# The README's class command starts the server with --warm: every page built once before the
# first reader (lessons.shell.first_build), so "cold" is a server ready to serve a class.
CLASS_OPTIONS = ("--warm",)

CHURN_PAGES = [{"lesson": slug} for slug in MIX] + [{"lesson": "two-clocks"}, {"page": "about"}, {}]
CHURN_HOLD_S = 5.0


def churn(bench: Run, count: int, at_once: int, kernels: bool = True,
          bokeh_clients: bool = False, server_env: dict[str, str] | None = None) -> int:
    """Open and close `count` sessions; the web process's memory on the way (see --churn)."""
    cohort = Cohort(bokeh_clients)
    cache = fresh_cache("classroom-churn-cache-", kernels)
    RESULTS.mkdir(parents=True, exist_ok=True)
    log = RESULTS / f"classroom-churn-{count}-server.log"
    proc, url = start_server(cache, extra=CLASS_OPTIONS, log=log, env_extra=server_env)
    samples: list[dict] = []

    def sample(opened: int, what: str) -> None:
        status = engine_status(url) or {}
        row = {"sessions": opened, "what": what, **memory(proc.pid, status.get("worker_pid"))}
        samples.append(bench.round(row, f"  {what:<26} sessions {opened:>4}: web "
                                        f"{row['web_mib']} MiB, worker {row['worker_mib']} MiB"))

    def reader(n: int, args: dict) -> None:
        visit(cohort.new(n, url, args.get("lesson", ""), args, None, random.Random(n)),
              CHURN_HOLD_S)

    try:
        sample(0, f"server started, {after_trim(url)}")
        opened = 0
        for args in CHURN_PAGES:  # every page once: its modules imported, the worker warm
            reader(opened, args)
            opened += 1
        sample(opened, f"baseline, {after_trim(url)}")
        baseline = samples[-1]["web_mib"]
        while opened < count:
            batch = [threading.Thread(target=reader, args=(opened + i, CHURN_PAGES[
                (opened + i) % len(CHURN_PAGES)]), daemon=True) for i in range(at_once)]
            for t in batch:
                t.start()
            for t in batch:
                t.join(60)
            opened += len(batch)
            if opened % 50 < at_once:
                sample(opened, "just closed")
        time.sleep(5)
        sample(opened, "5 s after the last left")
        sample(opened, f"end, {after_trim(url)}")
    finally:
        stop_server(proc)
        cohort.stop()
    end = samples[-1]["web_mib"]
    growth = end / baseline - 1 if baseline and end else None
    start = samples[0]["web_mib"]
    from_start = end / start - 1 if start and end else None
    result = {"sessions": opened, "at_once": at_once,
              "samples": samples, "web_growth_over_baseline": rounded(growth),
              "web_growth_over_start": rounded(from_start),
              "server_log_tracebacks": exceptions_logged(log)}
    out = RESULTS / f"classroom-churn-{count}.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"  web RSS end vs baseline: {pct(growth)}, vs the server's start "
          f"{pct(from_start)} (target within "
          f"{100 * TARGETS['rss_after_within']:.0f}%); server log tracebacks "
          f"{result['server_log_tracebacks']}; saved {out.relative_to(ROOT)}")
    bench.target("web RSS at the end over the server's start",
                 from_start if from_start is not None else float("inf"),
                 at_most=TARGETS["rss_after_within"])
    return bench.finish(result)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if "--class-mode" in argv:  # the class as the load: bench/lab/class_mode.py
        from bench.lab.class_mode import main as class_mode

        return class_mode([a for a in argv if a != "--class-mode"])
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--students", type=int, default=30, help="lightweight sessions (1-200)")
    parser.add_argument("--arrive-s", type=float, default=30.0,
                        help="the students arrive evenly over this many seconds")
    parser.add_argument("--class-s", type=float, default=90.0,
                        help="how long the class works after the first arrival (10-600 s)")
    parser.add_argument("--probe-every", type=float, default=20.0,
                        help="seconds between Chromium readers arriving (0: none)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--clients-anywhere", action="store_true",
                        help="let the students and Chromium run on the engine's cores too "
                             "(by default they keep to the web server's: see keep_off_engine_cores)")
    parser.add_argument("--churn", type=int, default=0,
                        help="memory only: open and close this many sessions (up to 2000)")
    parser.add_argument("--at-once", type=int, default=10, help="with --churn (1-50)")
    parser.add_argument("--bokeh-clients", action="store_true",
                        help="students as Bokeh client sessions, a thread each (for "
                             "comparison) instead of protocol students")
    parser.add_argument("--no-kernels", action="store_true",
                        help="leave the C++ kernels unbuilt and the plans untimed in the "
                             "bench's cache (plain torch attention and products)")
    parser.add_argument("--server-env", action="append", default=[], metavar="NAME=VALUE",
                        help="set in the server's environment only, on top of the class "
                             "command's (PYTHONMALLOC=pymalloc: Python's own allocator); repeat")
    args = parser.parse_args(argv)
    if any("=" not in item for item in args.server_env):
        parser.error("--server-env takes NAME=VALUE")
    server_env = dict(item.split("=", 1) for item in args.server_env)
    if args.churn:
        if not 1 <= args.churn <= 2000 or not 1 <= args.at_once <= 50:
            parser.error("--churn 1-2000, --at-once 1-50")
        return churn(Run("classroom-churn", args), args.churn, args.at_once,
                     kernels=not args.no_kernels,
                     bokeh_clients=args.bokeh_clients, server_env=server_env)
    if not 1 <= args.students <= 200 or not 10 <= args.class_s <= 600 or args.arrive_s < 0:
        parser.error("--students 1-200, --class-s 10-600, --arrive-s >= 0")
    rng = random.Random(args.seed)
    bench = Run("classroom", args)
    cache = fresh_cache("classroom-cache-", kernels=not args.no_kernels)
    log = RESULTS / f"classroom-{args.students}-server.log"
    RESULTS.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    proc, url = start_server(cache, extra=CLASS_OPTIONS, log=log, env_extra=server_env)
    answered_s = time.monotonic() - started
    hard_stop = time.monotonic() + args.arrive_s + args.class_s + GRACE_S + 60
    students: list = []
    cohort: Cohort | None = None
    students_cpu: float | None = None
    warm_errors: list[str] = []
    probes: list[dict] = []
    queue: list[dict] = []
    rss: dict = {}
    stop = threading.Event()
    try:
        deadline = time.monotonic() + WAIT_S
        status = engine_status(url)
        while not (status and status.get("ready")) and time.monotonic() < deadline:
            time.sleep(0.5)  # the worker starts with the first page (the server's check above)
            status = engine_status(url)
        rss["start_s"] = {"app_answered": rounded(answered_s),
                          "engine_ready": rounded(time.monotonic() - started)}
        worker = (status or {}).get("worker_pid") or next(iter(child_pids(proc.pid)), None)
        clients_on = keep_off_engine_cores(status, args.clients_anywhere)
        cohort, priority = students_and_chromium(args.bokeh_clients)
        clients_on = f"{clients_on}; {priority}"
        when = after_trim(url)  # each sample once the server's cleanup is done, as "after"
        rss["cold"] = {**memory(proc.pid, worker), "when": when}
        warm_errors = warm_up(cohort, url)
        when = after_trim(url)
        rss["warm"] = {**memory(proc.pid, worker), "when": when}
        print(f"web RSS cold {rss['cold']['web_mib']} MiB, warm (every page built once) "
              f"{rss['warm']['web_mib']} MiB ({rss['warm']['when']})", flush=True)
        start = time.monotonic()
        cpu_before = cohort.cpu_s([])  # the warm-up's pages on the students' loop: not the class's

        def sample_queue() -> None:
            while not stop.is_set():
                s = engine_status(url) or {}
                running = s.get("running") or {}
                queue.append({"t_s": round(time.monotonic() - start, 1),
                              "queued": s.get("queued"), "running": bool(running),
                              "running_kind": running.get("kind"),
                              "running_s": running.get("running_s"),
                              **{k: s.get(k) for k in ENGINE_COUNTS},
                              **memory(proc.pid, s.get("worker_pid") or worker)})
                stop.wait(1.0)

        sampler = threading.Thread(target=sample_queue, daemon=True)
        sampler.start()
        cpu_sampler = CpuSampler(cpu_groups(proc.pid, worker), start).start()
        lessons = [slug for slug, (weight, _, _) in MIX.items() for _ in range(weight)]
        for n in range(args.students):
            slug = lessons[n % len(lessons)]
            weight, choices, slider = MIX[slug]
            query = {"lesson": slug, **{k: str(rng.choice(v)) for k, v in choices.items()}}
            students.append(cohort.new(n, url, slug, query, slider,
                                       random.Random(args.seed * 1000 + n)))
        arrivals = [start + i * args.arrive_s / max(1, args.students) for i in range(args.students)]
        next_release = {s.n: arrivals[s.n] + rng.uniform(15, 25) for s in students}
        class_end = start + args.class_s
        prober = threading.Thread(target=chromium_readers, daemon=True, name="chromium",
                                  args=(url, args.probe_every, start, class_end, stop, probes))
        if args.probe_every > 0:
            prober.start()  # its own thread: a reader waiting on a page holds up no student
        while time.monotonic() < class_end and time.monotonic() < hard_stop:
            now = time.monotonic()
            for s in students:
                if not s.started and now >= arrivals[s.n]:
                    s.start()
                if s.started and now >= next_release[s.n]:
                    s.release()
                    next_release[s.n] = now + s.rng.uniform(10, 25)
            time.sleep(0.2)
        if prober.ident is not None:
            prober.join(max(1.0, hard_stop - time.monotonic()))  # its waits are bounded too
        cpu_sampler.stop()
        rss["during_max"] = {k: max((q[k] for q in queue if q[k] is not None), default=None)
                             for k in ("web_mib", "worker_mib")}
        for s in students:
            s.close()
        for s in students:
            s.join(max(1.0, min(30.0, hard_stop - time.monotonic())))
        students_cpu = cohort.cpu_s(students) - cpu_before
        settle = time.monotonic() + 30
        while time.monotonic() < settle and (engine_status(url) or {}).get("queued"):
            time.sleep(1)  # the closed sessions' jobs are cancelled; let the last one end
        trimmed = after_trim(url)  # as --churn: the sessions discarded, the trim after them run
        rss["after"] = {**memory(proc.pid, worker), "when": trimmed}
    finally:
        stop.set()
        stop_server(proc)
        if cohort is not None:
            cohort.stop()
    lags = [lag for lag in (cohort.loop.lags if cohort.loop else []) if lag[0] >= start]
    return report(args, cohort.kind, students, students_cpu, lags, probes, queue, rss,
                  bench, log, clients_on, cpu_sampler.samples, warm_errors)



if __name__ == "__main__":
    sys.exit(main())
