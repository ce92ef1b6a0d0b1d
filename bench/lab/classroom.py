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
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: engine, bench

from bench.harness import Run  # noqa: E402
from bench.lab.proc_cpu import CpuSampler, descendants, lowest_priority_sessions, windows
from bench.lab.students import SHOWN, BokehStudent, ProtocolStudent, StudentLoop, deep_client_stacks
from bench.web.served_app import (
    CHROMIUM,
    CHROMIUM_ARGS,
    ROOT,
    SKIP_PREDICTION,
    child_pids,
    rss_mib,
    start_server,
    stop_server,
)

RESULTS = ROOT / "bench" / "results"
TARGETS = {"first_number_p95_s": 10.0, "release_to_drawn_p95_s": 5.0, "rss_after_within": 0.20}
WAIT_S = 120.0  # the most any one reader waits for anything
GRACE_S = 120.0  # after the class: for the last results, the sessions to close, memory to settle
# The README's class command starts the server with --warm: every page built once before the
# first reader (lessons.shell.first_build), so "cold" is a server ready to serve a class.
CLASS_OPTIONS = ("--warm",)

# Lessons the students open (weight, URL settings to choose from, the slider they move and values).
MIX = {
    "knob": (4, {"batch_size": [2, 4, 6, 8, 12, 16, 24, 32], "prompt_len": [32, 64, 96],
                 "new_tokens": [16, 32]}, ("Batch size", [3, 5, 10, 20, 28, 40, 48, 64])),
    "three-schedules": (2, {"policy": ["static", "dynamic", "continuous"],
                            "max_batch": [2, 4, 8], "rate": [5, 10, 20]},
                        ("Arrival rate", [4, 8, 15, 25])),
    "average-lies": (2, {"rate": [2, 4, 6], "requests": [20, 40, 80]},
                     ("Arrival rate", [3, 5, 8])),
    "roofline": (1, {"max_batch": [8, 16, 32], "max_prompt": [256, 1024]}, None),
    "kv-cache": (1, {}, None),
    "chunked-prefill": (1, {"chunk_size": [64, 128, 256], "requests": [4, 8]},
                        ("Chunk size", [32, 96, 192, 512])),
    "slo-goodput": (1, {"points": [3, 4, 5], "requests": [16, 32]}, None),
}
PROBE_LESSONS = ["knob", "three-schedules", "average-lies", "roofline", "chunked-prefill"]


def percentile(values: list[float], q: float) -> float | None:
    """The q-th percentile (0-100), linear between ranks; None for no values."""
    if not values:
        return None
    values = sorted(values)
    k = (len(values) - 1) * q / 100
    lo, hi = int(k), min(int(k) + 1, len(values) - 1)
    return values[lo] + (values[hi] - values[lo]) * (k - lo)


def summary(values: list[float], digits: int = 2) -> dict:
    return {"n": len(values), "p50_s": _round(percentile(values, 50), digits),
            "p95_s": _round(percentile(values, 95), digits),
            "max_s": _round(max(values, default=None), digits)}


def _round(x: float | None, digits: int = 2) -> float | None:
    return None if x is None else round(x, digits)


# ---- the Chromium reader -------------------------------------------------------------------------
def probe_arrival(browser, url: str, slug: str, knob_batch: int) -> dict:
    """A new reader in a fresh browser context: seconds to the first number, and on the knob the
    seconds from a slider release (at a batch nobody asked for) to its point drawn."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    from bench.web.ui_latency import POINT_DRAWN_JS

    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    out: dict = {"lesson": slug, "first_number_s": None, "release_to_drawn_s": None}
    try:
        start = time.monotonic()
        extra = f"&batch_size={knob_batch - 1}" if slug == "knob" else ""
        page.goto(f"{url}/app?lesson={slug}{extra}", wait_until="commit")
        try:
            page.get_by_role("button", name=SKIP_PREDICTION).click(timeout=WAIT_S * 1000)
        except PlaywrightTimeout:
            out["error"] = "no prediction to skip within the wait"
        try:
            page.get_by_text(SHOWN).first.wait_for(timeout=WAIT_S * 1000)
            out["first_number_s"] = round(time.monotonic() - start, 2)
        except PlaywrightTimeout:
            out["error"] = "no number within the wait"
        if slug == "knob" and out["first_number_s"] is not None:
            handle = page.locator(".noUi-handle").first
            handle.focus()
            t0 = page.evaluate("() => performance.now()")
            handle.press("ArrowRight")
            try:
                drawn = page.wait_for_function(POINT_DRAWN_JS, arg=knob_batch, polling="raf",
                                               timeout=WAIT_S * 1000).json_value()
                out["release_to_drawn_s"] = round((drawn - t0) / 1000, 2)
            except PlaywrightTimeout:
                out["error"] = "the released point was not drawn within the wait"
    finally:
        context.close()
    return out


# ---- the server's side ---------------------------------------------------------------------------
def keep_off_engine_cores(status: dict | None, anywhere: bool) -> str:
    """Pin this thread (and so the students' and Chromium, started after it) to the web
    server's cores, off the engine's. In a class the readers' browsers run on their own machines;
    here they must share this one, and on the engine's core they would disturb every measurement
    (engine.lab.quality), which the service then labels or measures again: a cost no real class
    pays. Called before any student thread or Chromium starts: Linux keeps a CPU mask (and a
    niceness) per thread, and new threads and processes inherit them. Returns where, for the
    report."""
    split = (status or {}).get("cores") or {}
    if anywhere or not split.get("isolated"):
        return "every core (the engine's too)"
    from engine.lab import cores

    cores.pin(0, split["web"])
    return f"the web server's {cores.describe(split['web'])}"


def students_and_chromium(bokeh_clients: bool) -> tuple[Cohort, str]:
    """The students, then this thread at the lowest CPU priority (nice 19) for what it starts
    after: Chromium (and with --bokeh-clients, the students too); says who runs at which.

    Chromium and Bokeh client sessions cost the web core a large share of it at the server's
    priority while a class arrives, so they get its idle time only. A protocol student costs it
    a few ms a page, and at nice 19 it would be kept from the core the server keeps busy (its
    page-received times would measure the scheduler); a browser on a machine of its own reads
    what the server sends at once: protocol students run at the server's priority."""
    cohort = None if bokeh_clients else Cohort(False)
    os.nice(19 - os.nice(0))
    if cohort is None:
        return Cohort(True), "Bokeh client students and Chromium at nice 19"
    return cohort, "protocol students at nice 0, Chromium at nice 19"


def engine_status(url: str) -> dict | None:
    try:
        with urllib.request.urlopen(f"{url}/engine-status", timeout=5) as response:
            return json.loads(response.read())
    except (OSError, ValueError):
        return None


def exceptions_logged(log) -> int | None:
    """How many exceptions the server logged with a traceback: a chained one ("During handling
    of the above exception, another exception occurred") prints two tracebacks but is one."""
    if not log.exists():
        return None
    text = log.read_text()
    return (text.count("Traceback (most recent call last)")
            - text.count("During handling of the above exception")
            - text.count("The above exception was the direct cause"))


def after_trim(url: str) -> str:
    """Wait (bounded) until the server has discarded the closed sessions and trimmed after
    them, so a memory sample after the readers left is not taken just before the server gives
    memory back (widgets.runtime.heap trims TRIM_AFTER_S after the last discard); says which
    trim, for the printed line."""
    time.sleep(5)  # the server discards closed sessions (its flags: within about a second)
    heap = (engine_status(url) or {}).get("web_heap") or {}
    deadline = time.monotonic() + heap.get("trim_after_s", 10.0) + 20
    while heap.get("trim_pending") and time.monotonic() < deadline:
        time.sleep(0.5)  # a trim pending: discarding a session schedules one
        heap = (engine_status(url) or {}).get("web_heap") or {}
    if heap.get("trim_pending") or "trims" not in heap:
        return "no trim seen"
    return f"after trim {heap['trims']}"


def memory(server_pid: int, worker_pid: int | None) -> dict:
    return {"web_mib": _round(rss_mib(server_pid)), "worker_mib": _round(rss_mib(worker_pid))}


# /engine-status counters kept with each sample; gap_fills: points the service sent into a
# running load test's or schedule run's idle gaps (engine.lab.client _fill)
ENGINE_COUNTS = ("jobs_done", "cache_hits", "shared_runs", "preemptions", "jobs_cancelled",
                 "disturbed", "remeasured", "gap_fills")


CHURN_PAGES = [{"lesson": slug} for slug in MIX] + [{"lesson": "two-clocks"}, {"page": "about"}, {}]
CHURN_HOLD_S = 5.0


def fresh_cache(prefix: str, kernels: bool) -> str:
    """A cache directory with no result in it, set up as a class's machine is unless not
    `kernels`: the C++ kernels built there, then the lessons' models' plans timed and the
    machine's limits measured (`python -m engine tune`, pinned like the worker), so that the
    class's first jobs do not measure the limits while the class loads the machine. Without
    `kernels` neither: the worker then times each plan, without "cpp", when a reader first
    needs it, and measures the limits."""
    cache = tempfile.mkdtemp(prefix=prefix)
    if kernels:
        for what, done_as, command in (("C++ kernels", "built", "build-kernel"),
                                       ("matrix-product plans and limits", "timed", "tune")):
            start = time.monotonic()
            done = subprocess.run([sys.executable, "-m", "engine", command], text=True,
                                  env={**os.environ, "LLM_SPEED_CACHE": cache},
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
            ok = done.returncode == 0
            why = "" if ok else ": " + (done.stdout.strip().splitlines() or ["?"])[-1]
            print(f"set-up: {what} {done_as if ok else 'NOT ' + done_as} in the bench's cache "
                  f"({time.monotonic() - start:.0f} s){why}", flush=True)
            for line in done.stdout.splitlines():  # the limits: kept, or disturbed (not kept)
                if line.startswith(("limits", "note: the machine's limits")):
                    print(f"set-up: {line}", flush=True)
    return cache


class Cohort:
    """The students of one run, all of one kind: protocol students on one StudentLoop (the
    default), or Bokeh client sessions, a thread each (--bokeh-clients)."""

    def __init__(self, bokeh_clients: bool):
        self.kind = "Bokeh client sessions" if bokeh_clients else "protocol students"
        self.loop = None
        if bokeh_clients:
            deep_client_stacks()
        else:
            self.loop = StudentLoop()

    def new(self, n: int, url: str, slug: str, query: dict, slider, rng: random.Random,
            ready: bool = True):
        if self.loop is None:
            return BokehStudent(n, url, slug, query, slider, rng, ready=ready)
        return ProtocolStudent(n, url, slug, query, slider, rng, ready=ready, loop=self.loop)

    def cpu_s(self, students: list) -> float | None:
        """Every student's CPU seconds so far: the loop's thread, or each client's thread (its
        whole visit, known once it has ended)."""
        if self.loop is not None:
            return self.loop.cpu_s()
        return sum(s.cpu_s for s in students if s.cpu_s is not None)

    def stop(self) -> None:
        if self.loop is not None:
            self.loop.stop()


def visit(student, hold_s: float, until=lambda s: s.first_number_s is not None) -> None:
    """Open a page, stay until `until(student)` or hold_s seconds, leave (bounded waits)."""
    student.start()
    deadline = time.monotonic() + hold_s
    while not until(student) and time.monotonic() < deadline and not student.error:
        time.sleep(0.1)
    student.close()
    student.join(30)


def warm_up(cohort: Cohort, url: str) -> list[str]:
    """Every page of MIX and PROBE_LESSONS opened once, one after the other, without the ready
    event (so no lesson starts a measurement), and closed: the server has built each and
    imported its modules, as after a first class. Returns the errors met."""
    slugs = list(dict.fromkeys([*MIX, *PROBE_LESSONS]))
    pages = [cohort.new(-1 - i, url, slug, {"lesson": slug}, None, random.Random(i), ready=False)
             for i, slug in enumerate(slugs)]
    for page in pages:
        visit(page, WAIT_S, until=lambda s: s.pulled_s is not None)
    return [f"warm-up {p.slug}: {p.error or 'no page'}" for p in pages
            if p.error or p.pulled_s is None]


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
              "samples": samples, "web_growth_over_baseline": _round(growth),
              "web_growth_over_start": _round(from_start),
              "server_log_tracebacks": exceptions_logged(log)}
    out = RESULTS / f"classroom-churn-{count}.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"  web RSS end vs baseline: {_pct(growth)}, vs the server's start "
          f"{_pct(from_start)} (target within "
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
        rss["start_s"] = {"app_answered": _round(answered_s),
                          "engine_ready": _round(time.monotonic() - started)}
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


CPU_GROUPS = ["web", "worker", "students", "chromium"]


def cpu_groups(server: int, worker: int | None) -> dict:
    """The processes whose CPU the report shows: the web server, the engine worker, this
    process (the students' threads, the samplers, Playwright's client) and Chromium (with
    Playwright's driver: every other process below this one)."""
    me = os.getpid()

    def chromium() -> list[int]:
        ours = {server, *descendants(server)}
        return [p for p in descendants(me) if p not in ours]

    return {"web": lambda: [server], "worker": lambda: [worker] if worker else [],
            "students": lambda: [me], "chromium": chromium}


def chromium_readers(url: str, every_s: float, start: float, until: float,
                     stop: threading.Event, probes: list[dict]) -> None:
    """A new Chromium reader every `every_s` seconds (the first at every_s / 2) until `until`,
    each on the next lesson of PROBE_LESSONS; appends what each saw to `probes`. Runs in a
    thread of its own (Playwright's sync API is used from this thread only)."""
    next_probe = start + every_s / 2
    with _browser(True) as browser:
        probe_n, knob_batch = 0, 41  # the Chromium reader's knob points: 41, 42, ...
        while not stop.is_set() and time.monotonic() < until:
            if time.monotonic() < next_probe:
                stop.wait(0.2)
                continue
            slug = PROBE_LESSONS[probe_n % len(PROBE_LESSONS)]
            t_s = round(time.monotonic() - start, 1)
            probes.append({"t_s": t_s, **probe_arrival(browser, url, slug, knob_batch)})
            print(f"  probe {probes[-1]}", flush=True)
            probe_n += 1
            knob_batch += slug == "knob"
            next_probe = time.monotonic() + every_s


class _browser:
    """Chromium for the probe, or None when there is no probe."""

    def __init__(self, wanted: bool):
        self.wanted = wanted

    def __enter__(self):
        if not self.wanted:
            return None
        from playwright.sync_api import sync_playwright

        self._pw = sync_playwright().start()
        self._browser = self._pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS,
                                                 headless=True)
        # nice 19 (students_and_chromium) binds Chromium only inside its own sessions' groups:
        # the groups themselves at nice 19, or it takes half the web core whenever it wants
        groups = lowest_priority_sessions(descendants(os.getpid()))
        print(f"  Chromium's scheduler groups at nice 19: {', '.join(groups) or 'none'}",
              flush=True)
        return self._browser

    def __exit__(self, *exc):
        if self.wanted:
            self._browser.close()
            self._pw.stop()


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
            "all_students_s": _round(students_cpu, 3),
            "per_page_s": _round(students_cpu / len(pulled) if pulled and students_cpu else None,
                                 4)},
        "cpu_share_every_5_s": windows(cpu, CPU_GROUPS + _cores(cpu), 5.0, args.class_s + 30),
        "cpu_samples": cpu,
        "student_timelines": [
            {"n": s.n, "lesson": s.slug, "session_id": s.session_id,
             "opened_unix": round(s.opened_unix, 3),
             **{k: _round(getattr(s, k)) for k in ("pulled_s", "pull_cpu_s", "ready_s",
                                                   "skip_s", "first_number_s",
                                                   "first_result_s")}}
            for s in students],
        "queue": queue, "queue_max": max((q["queued"] or 0 for q in queue), default=0),
        "engine_counts": engine_counts(queue),
        "rss_mib": rss, "web_rss_growth": {k: _round(g) for k, g in growth.items()},
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
              f"{kind} {n}" for kind, n in _running_by_kind(queue).items()))
    cold, warm = rss.get("cold", {}), rss.get("warm", {})
    print(f"  server start: /app answered {rss.get('start_s', {}).get('app_answered')} s, engine "
          f"ready {rss.get('start_s', {}).get('engine_ready')} s after launch")
    print(f"  RSS MiB web / worker: cold {cold.get('web_mib')} / {cold.get('worker_mib')} "
          f"({cold.get('when')}), warm "
          f"{warm.get('web_mib')} / {warm.get('worker_mib')} ({warm.get('when')}), during max "
          f"{rss.get('during_max', {}).get('web_mib')} / "
          f"{rss.get('during_max', {}).get('worker_mib')}, after {after.get('web_mib')} / "
          f"{after.get('worker_mib')} ({after.get('when')}); web after vs cold "
          f"{_pct(growth['cold'])}, vs warm {_pct(growth['warm'])}")
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


def _running_by_kind(queue: list[dict]) -> dict[str, int]:
    """How many of the once-a-second samples found each job kind running, most first."""
    counts: dict[str, int] = {}
    for q in queue:
        if q.get("running_kind"):
            counts[q["running_kind"]] = counts.get(q["running_kind"], 0) + 1
    return dict(sorted(counts.items(), key=lambda kv: -kv[1]))


def _pct(x: float | None) -> str:
    return "?" if x is None else f"{100 * x:+.0f}%"


if __name__ == "__main__":
    sys.exit(main())
