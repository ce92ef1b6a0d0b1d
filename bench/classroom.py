"""A class on one machine: N students on the served app, from an empty measurement cache.

    python bench/classroom.py [--students 30] [--arrive-s 30] [--class-s 90] [--seed 0]
    python bench/classroom.py --churn 500 [--at-once 10]

Starts `panel serve app.py` (the README's command) on 127.0.0.1 with an empty cache, then:
(The cache directory holds no result; the C++ kernels are built into it first, as the README's
class set-up does (`python -m lessons.warm` runs `python -m engine build-kernel`): a build is the
machine's, not a measurement. Up to 4773566 they were not, so every class figure measured before
ran on plain torch attention and torch products; `--no-kernels` keeps that.)
- N lightweight students, each a Bokeh client session (bokeh.client.pull_session) that sends the
  browser's "document ready" event, so the lesson starts its measurements as in a browser. They
  arrive evenly over --arrive-s seconds, each on a lesson of MIX with settings of its own (its
  URL). Every lesson measures nothing fresh before its reader predicts or skips (lessons.base):
  each student skips at once ("Skip the prediction and measure"), so the figures below leave out a
  reader's own thinking time. While the class lasts each moves one of its lesson's sliders every
  10-25 s (setting the slider's value and sending the released value, as a mouse release does).
- one real reader, Chromium driven by Playwright (/usr/bin/chromium, headless): every
  --probe-every seconds a new page (a newly arriving reader) on the next lesson of PROBE_LESSONS,
  skipping its prediction once the button is there; on the knob it also releases the slider at a
  batch nobody asked for. It runs in a thread of its own, so its waits hold up no student.
The students and Chromium keep to the web server's cores, off the engine's (keep_off_engine_cores;
--clients-anywhere lets them run anywhere): a class's browsers are on other machines.
It prints and saves (bench/results/classroom-<N>.json):
- time to first number for a newly arriving reader: from opening the page to the first measured
  number on it (the status line's "measured live" / "cached: measured" / "nearby", or a run's
  partial "measured live so far" figure while it goes on), p50 and p95, for the students and for
  the Chromium reader apart; and, for the students, the time to the first full result (a
  partial figure left out);
- slider release to point drawn on the knob (the point in the chart's data), p95; and release to
  the new result shown on the other lessons;
- the engine queue's length over time and what the worker runs (the app's /engine-status, once
  a second), with its counts of runs, cache answers and disturbed results; the server log
  (bench/results/classroom-<N>-server.log) has a line per measured run with its time;
- resident memory (RSS) of the web process and the engine worker before the class, the most
  during it, and after every session has closed and the server has trimmed after them (as
  --churn below; up to this change the "after" was sampled 10 s after the close, before that
  trim);
- where a student's wait went (p50 / p95 seconds after opening): its page received (the server
  built and serialized it, the client rebuilt it), the ready event and the skip sent, the first
  number; and, every 5 s, the share of a core used by the web server, the worker, this process
  (the students) and Chromium, and each core's busy share (bench/proc_cpu.py, from /proc), so a
  slow arrival can be told apart as the server's own work, the load generator's or the engine's.
What the bench costs the web core: in a real class the browsers are elsewhere; here the students'
Bokeh clients took 0.2-0.35 of that core while 30 arrived in 30 s, and Chromium up to 0.2
(20:01 UTC run). They run at nice 19 (keep_off_engine_cores), on its idle time only.
Targets (issue 16, N = 30 on 2 cores, empty cache): first number p95 <= 10 s, release to drawn p95
<= 5 s, web RSS after within 20% of before.

--churn N: memory only. N readers open a page (every lesson, the about page and the course map in
turn, --at-once at a time), wait for its first number (at most 5 s) and leave; the web process's
RSS is printed at the start, after a first round over every page (its modules imported: the
baseline), every 50 readers (just after they left: their memory not yet returned), and at the
end. The baseline and the end are both taken once the server has discarded the closed sessions
and run the memory trim that follows (lessons.shell.heap, TRIM_AFTER_S later; /engine-status's
"web_heap" says when none is pending): both with no session open, after the same cleanup. Up to
c1df6bc the end was sampled 10 s after the last reader left, about 2 s before that trim ran, and
the baseline whenever it fell: the +50% measured there was memory the server was about to give
back (a bench defect). Target: the end within 20% of the baseline. Bounded: every wait has a
timeout, the whole run stops after arrive + class + 120 s whatever happens, and the server is
stopped at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass, field

from proc_cpu import CpuSampler, descendants, windows
from served_app import (
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
SHOWN = re.compile(r"measured live|cached: measured|nearby")  # a number on the page, and whence
PARTIAL = re.compile(r"measured live so far")  # a run's figure while it goes on (job_status)
WAIT_S = 120.0  # the most any one reader waits for anything
GRACE_S = 120.0  # after the class: for the last results, the sessions to close, memory to settle

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


def summary(values: list[float]) -> dict:
    return {"n": len(values), "p50_s": _round(percentile(values, 50)),
            "p95_s": _round(percentile(values, 95)), "max_s": _round(max(values, default=None))}


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 2)


# ---- the lightweight students ------------------------------------------------------------------
@dataclass
class Student:
    """One reader as a Bokeh client session in a thread of its own."""

    n: int
    url: str
    slug: str
    args: dict  # the page's query: {"lesson": slug, settings...}
    slider: tuple[str, list] | None
    rng: random.Random
    opened_at: float = 0.0
    opened_unix: float = 0.0  # the same moment on the wall clock, to match the server's log
    first_number_s: float | None = None
    first_result_s: float | None = None  # the first full result (no partial figure)
    releases: list[dict] = field(default_factory=list)  # {"value", "at", "drawn_s"}
    error: str = ""
    # the arrival's timeline (seconds after opening): the document received (pull_session
    # returned: the server built the page, serialized it and this client rebuilt it), the
    # ready event and the skip click sent
    pulled_s: float | None = None
    pull_cpu_s: float | None = None  # of which this client's own CPU (rebuilding the document)
    ready_s: float | None = None
    skip_s: float | None = None
    session_id: str = ""
    _session: object = None
    _skipped: bool = False
    _closing: bool = False  # close() came: a session still being pulled is closed once it is
    _pending: dict | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def run(self) -> None:
        import panel.models  # noqa: F401 (registers Panel's Bokeh models, so the client can read the page)
        from bokeh.client import pull_session
        from bokeh.events import DocumentReady

        self.opened_at, self.opened_unix = time.monotonic(), time.time()
        cpu = time.thread_time()  # pull_session runs its connection's loop on this thread
        try:
            session = pull_session(url=f"{self.url}/app", arguments=self.args)
        except Exception as e:  # a refused or failed connection: a finding, not a crash
            self.error = f"{type(e).__name__}: {e}"
            return
        self._session = session
        self.pulled_s = time.monotonic() - self.opened_at
        self.pull_cpu_s = time.thread_time() - cpu
        self.session_id = session.id
        if self._closing:  # left while the page was still loading (a busy server)
            session.close()
            return
        session.document.on_change(self._changed)
        session.document.callbacks.send_event(DocumentReady())  # the browser's "loaded"
        self.ready_s = time.monotonic() - self.opened_at
        self._skip_prediction()
        try:
            session._loop_until_closed()  # process the server's updates until closed
        except Exception as e:
            self.error = f"{type(e).__name__}: {e}"

    def _skip_prediction(self) -> None:
        """Click the lesson's skip button once it is on the page (on this session's thread)."""
        from bokeh.events import ButtonClick
        from bokeh.models import Button

        if self._skipped:
            return
        for model in list(self._session.document.models):
            if isinstance(model, Button) and model.label == SKIP_PREDICTION:
                self._skipped = True
                self._session.document.callbacks.send_event(ButtonClick(model))
                self.skip_s = time.monotonic() - self.opened_at
                return

    def _changed(self, event) -> None:
        """Every change the server sends, on this session's thread."""
        now = time.monotonic()
        if not self._skipped:
            self._skip_prediction()
        new = getattr(event, "new", None)
        if isinstance(new, str) and SHOWN.search(new):
            partial = PARTIAL.search(new) is not None
            if self.first_number_s is None:
                self.first_number_s = now - self.opened_at
            if self.first_result_s is None and not partial:
                self.first_result_s = now - self.opened_at
            with self._lock:
                pending = self._pending
            if pending and pending["kind"] == "shown" and now > pending["at"] and not partial:
                self._drawn(now)
        with self._lock:
            pending = self._pending
        if pending and pending["kind"] == "point":
            source = self._session.document.get_model_by_name("points")
            batch = list(source.data.get("batch", [])) if source is not None else []
            if pending["value"] in batch:
                self._drawn(now)

    def _drawn(self, now: float) -> None:
        with self._lock:
            if self._pending is not None:
                self._pending["drawn_s"] = now - self._pending["at"]
                self.releases.append(self._pending)
                self._pending = None

    def release(self) -> None:
        """Move the lesson's slider to another value and release it (from any thread)."""
        if self._session is None or self.slider is None or self._pending is not None:
            return
        title, values = self.slider
        value = self.rng.choice(values)

        def move() -> None:
            from bokeh.document.events import ModelChangedEvent
            from bokeh.models import Slider

            sliders = [m for m in self._session.document.models
                       if isinstance(m, Slider) and title in (m.title or "")]
            if not sliders or sliders[0].value == value:
                return
            kind = "point" if self.slug == "knob" else "shown"
            with self._lock:
                self._pending = {"slider": title, "value": value, "kind": kind,
                                 "at": time.monotonic(), "drawn_s": None}
            slider = sliders[0]
            slider.value = value
            # A mouse release sends value_throttled, which a Bokeh client may not set (it is
            # read-only in Python): send the same change the browser's release sends.
            self._session._document_patched(ModelChangedEvent(
                self._session.document, slider, "value_throttled", value))

        self._session._connection.io_loop.add_callback(move)

    def close(self) -> None:
        """Leave (from any thread): the session closes now, or as soon as its page has loaded
        (without that, a reader who left during a slow load stayed connected for good: in the
        lead's churn run the server had opened 110 connections and closed 11 by the 100th
        reader)."""
        self._closing = True
        session = self._session
        if session is not None:
            session._connection.io_loop.add_callback(session.close)


# ---- the Chromium reader -------------------------------------------------------------------------
def probe_arrival(browser, url: str, slug: str, knob_batch: int) -> dict:
    """A new reader in a fresh browser context: seconds to the first number, and on the knob the
    seconds from a slider release (at a batch nobody asked for) to its point drawn."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout
    from ui_latency import POINT_DRAWN_JS

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
    """Pin this process (the students, and the Chromium it starts later) to the web server's
    cores, off the engine's, at the lowest CPU priority (nice 19). In a class the readers'
    browsers run on their own machines; here they must share this one, and on the engine's core
    they would disturb every measurement (engine.lab.quality), which the service then labels or
    measures again: a cost no real class pays. On the web server's core at the same priority
    they took a quarter to a third of it while the class arrived (the students' Bokeh clients
    0.9-1.7 CPU s per 5 s, Chromium up to 0.9: proc_cpu, 20:01 UTC run), time the server then
    lacked. At nice 19 they get the core's idle time; a student whom a busy server keeps from
    the core reads its number late, so the figures still err on the slow side. Called before any
    student thread or Chromium starts: Linux keeps a niceness and a CPU mask per thread, and new
    threads and processes inherit them. Returns where they run, for the report."""
    os.nice(19 - os.nice(0))
    split = (status or {}).get("cores") or {}
    if anywhere or not split.get("isolated"):
        return "every core (the engine's too), at nice 19"
    from engine.lab import cores

    cores.pin(0, split["web"])
    return f"the web server's {cores.describe(split['web'])}, at nice 19"


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
    memory back (lessons.shell.heap trims TRIM_AFTER_S after the last discard); says which
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


ENGINE_COUNTS = ("jobs_done", "cache_hits", "shared_runs", "preemptions", "jobs_cancelled",
                 "disturbed", "remeasured")  # /engine-status counters kept with each sample


CHURN_PAGES = [{"lesson": slug} for slug in MIX] + [{"lesson": "two-clocks"}, {"page": "about"}, {}]
CHURN_HOLD_S = 5.0


def fresh_cache(prefix: str, kernels: bool) -> str:
    """A cache directory with no result in it, and the C++ kernels built there unless not
    `kernels` (about 16 s on 2 cores; a class's machine has them from its set-up)."""
    cache = tempfile.mkdtemp(prefix=prefix)
    if kernels:
        start = time.monotonic()
        built = subprocess.run([sys.executable, "-m", "engine", "build-kernel"], text=True,
                               env={**os.environ, "LLM_SPEED_CACHE": cache},
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        ok = built.returncode == 0
        why = "" if ok else ": " + (built.stdout.strip().splitlines() or ["?"])[-1]
        print(f"C++ kernels {'built' if ok else 'NOT built'} in the bench's cache "
              f"({time.monotonic() - start:.0f} s){why}", flush=True)
    return cache


def churn(count: int, at_once: int, kernels: bool = True) -> int:
    """Open and close `count` sessions; the web process's memory on the way (see --churn)."""
    cache = fresh_cache("classroom-churn-cache-", kernels)
    RESULTS.mkdir(parents=True, exist_ok=True)
    log = RESULTS / f"classroom-churn-{count}-server.log"
    proc, url = start_server(cache, log=log)
    samples: list[dict] = []

    def sample(opened: int, what: str) -> None:
        status = engine_status(url) or {}
        samples.append({"sessions": opened, "what": what,
                        **memory(proc.pid, status.get("worker_pid"))})
        print(f"  {what:<26} sessions {opened:>4}: web {samples[-1]['web_mib']} MiB, worker "
              f"{samples[-1]['worker_mib']} MiB", flush=True)

    def visit(n: int, args: dict) -> None:
        student = Student(n, url, args.get("lesson", ""), args, None, random.Random(n))
        thread = threading.Thread(target=student.run, daemon=True)
        thread.start()
        deadline = time.monotonic() + CHURN_HOLD_S
        while student.first_number_s is None and time.monotonic() < deadline:
            time.sleep(0.1)
        student.close()
        thread.join(30)

    try:
        time.sleep(2)
        sample(0, "server started")
        opened = 0
        for args in CHURN_PAGES:  # every page once: its modules imported, the worker warm
            visit(opened, args)
            opened += 1
        sample(opened, f"baseline, {after_trim(url)}")
        baseline = samples[-1]["web_mib"]
        while opened < count:
            batch = [threading.Thread(target=visit, args=(opened + i, CHURN_PAGES[
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
    end = samples[-1]["web_mib"]
    growth = end / baseline - 1 if baseline and end else None
    result = {"bench": "classroom-churn", "sessions": opened, "at_once": at_once,
              "samples": samples, "web_growth_over_baseline": _round(growth),
              "target": TARGETS["rss_after_within"],
              "met": growth is not None and growth <= TARGETS["rss_after_within"],
              "server_log_tracebacks": exceptions_logged(log)}
    out = RESULTS / f"classroom-churn-{count}.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"  web RSS end vs baseline: {_pct(growth)} (target within "
          f"{100 * TARGETS['rss_after_within']:.0f}%); server log tracebacks "
          f"{result['server_log_tracebacks']}; saved {out.relative_to(ROOT)}")
    return 0 if result["met"] else 1


def deep_client_stacks() -> None:
    """A Bokeh client session handles each message the server sends one await deeper than the
    last (bokeh.client.connection: _handle_messages awaits _next, which awaits the next
    _handle_messages), so a session that gets a few hundred page updates hits Python's recursion
    limit and stops listening (RecursionError in the lead's N=50 run and the churn run). A student
    lives for a class: give its thread room for tens of thousands of messages."""
    sys.setrecursionlimit(200_000)
    threading.stack_size(512 * 2**20)  # address space only, until used


def main(argv: list[str] | None = None) -> int:
    deep_client_stacks()
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
    parser.add_argument("--no-kernels", action="store_true",
                        help="leave the C++ kernels unbuilt in the bench's cache (plain torch "
                             "attention and products, as every class figure before 4773566)")
    args = parser.parse_args(argv)
    if args.churn:
        if not 1 <= args.churn <= 2000 or not 1 <= args.at_once <= 50:
            parser.error("--churn 1-2000, --at-once 1-50")
        return churn(args.churn, args.at_once, kernels=not args.no_kernels)
    if not 1 <= args.students <= 200 or not 10 <= args.class_s <= 600 or args.arrive_s < 0:
        parser.error("--students 1-200, --class-s 10-600, --arrive-s >= 0")
    rng = random.Random(args.seed)
    load_before = os.getloadavg()
    cache = fresh_cache("classroom-cache-", kernels=not args.no_kernels)
    log = RESULTS / f"classroom-{args.students}-server.log"
    RESULTS.mkdir(parents=True, exist_ok=True)
    proc, url = start_server(cache, log=log)
    hard_stop = time.monotonic() + args.arrive_s + args.class_s + GRACE_S + 60
    students: list[Student] = []
    threads: list[threading.Thread] = []
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
        worker = (status or {}).get("worker_pid") or next(iter(child_pids(proc.pid)), None)
        clients_on = keep_off_engine_cores(status, args.clients_anywhere)
        time.sleep(2)
        rss["before"] = memory(proc.pid, worker)
        start = time.monotonic()

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
            student = Student(n, url, slug, query, slider, random.Random(args.seed * 1000 + n))
            students.append(student)
            threads.append(threading.Thread(target=student.run, daemon=True,
                                            name=f"student-{n}"))
        arrivals = [start + i * args.arrive_s / max(1, args.students) for i in range(args.students)]
        next_release = {s.n: arrivals[s.n] + rng.uniform(15, 25) for s in students}
        class_end = start + args.class_s
        prober = threading.Thread(target=chromium_readers, daemon=True, name="chromium",
                                  args=(url, args.probe_every, start, class_end, stop, probes))
        if args.probe_every > 0:
            prober.start()  # its own thread: a reader waiting on a page holds up no student
        while time.monotonic() < class_end and time.monotonic() < hard_stop:
            now = time.monotonic()
            for s, t in zip(students, threads, strict=True):
                if not t.is_alive() and t.ident is None and now >= arrivals[s.n]:
                    t.start()
                if t.ident is not None and now >= next_release[s.n]:
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
        for t in threads:
            if t.ident is not None:
                t.join(max(1.0, min(30.0, hard_stop - time.monotonic())))
        settle = time.monotonic() + 30
        while time.monotonic() < settle and (engine_status(url) or {}).get("queued"):
            time.sleep(1)  # the closed sessions' jobs are cancelled; let the last one end
        trimmed = after_trim(url)  # as --churn: the sessions discarded, the trim after them run
        rss["after"] = {**memory(proc.pid, worker), "when": trimmed}
    finally:
        stop.set()
        stop_server(proc)
    return report(args, students, probes, queue, rss, load_before, log, clients_on,
                  cpu_sampler.samples)


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
        return self._browser

    def __exit__(self, *exc):
        if self.wanted:
            self._browser.close()
            self._pw.stop()


def report(args, students, probes, queue, rss, load_before, log, clients_on: str,
           cpu: list[dict]) -> int:
    first = [s.first_number_s for s in students if s.first_number_s is not None]
    full = [s.first_result_s for s in students if s.first_result_s is not None]
    knob = [r["drawn_s"] for s in students for r in s.releases if r["kind"] == "point"]
    other = [r["drawn_s"] for s in students for r in s.releases if r["kind"] == "shown"]
    probe_first = [p["first_number_s"] for p in probes if p["first_number_s"] is not None]
    probe_knob = [p["release_to_drawn_s"] for p in probes if p["release_to_drawn_s"] is not None]
    arrivals_first = first + probe_first
    releases = knob + probe_knob
    before, after = rss.get("before", {}), rss.get("after", {})
    web_growth = (after["web_mib"] / before["web_mib"] - 1
                  if before.get("web_mib") and after.get("web_mib") else None)
    first_p95 = percentile(arrivals_first, 95)
    release_p95 = percentile(releases, 95)
    met = {
        "first_number": first_p95 is not None and first_p95 <= TARGETS["first_number_p95_s"]
        and len(arrivals_first) == len(students) + len(probes),
        "release_to_drawn": release_p95 is not None
        and release_p95 <= TARGETS["release_to_drawn_p95_s"],
        "rss_after": web_growth is not None and web_growth <= TARGETS["rss_after_within"],
    }
    result = {
        "bench": "classroom", "students": args.students, "arrive_s": args.arrive_s,
        "class_s": args.class_s, "probe_every_s": args.probe_every, "seed": args.seed,
        "clients_on": clients_on,
        "cpu_count": os.cpu_count(), "load_average_before": [round(x, 2) for x in load_before],
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
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
        "rss_mib": rss, "web_rss_growth": _round(web_growth), "targets": TARGETS, "met": met,
        "errors": [f"{s.slug}: {s.error}" for s in students if s.error],
        "probes": probes,
        "server_log_tracebacks": exceptions_logged(log),
    }
    out = RESULTS / f"classroom-{args.students}.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"classroom: {args.students} students over {args.arrive_s:g} s, class {args.class_s:g} s,"
          f" {len(probes)} Chromium arrivals; {os.cpu_count()} CPUs, load before "
          f"{load_before[0]:.2f}; students and Chromium on {clients_on}")
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
    print("  share of a core used, every 5 s (web / worker / students / chromium; each core "
          "busy):")
    for w in result["cpu_share_every_5_s"]:
        print(f"    {w['from_s']:>5.0f}-{w['to_s']:<4.0f} s  " + " / ".join(
            f"{w[g]:.2f}" for g in CPU_GROUPS) + "   " + " ".join(
            f"{c} {w[c]}" for c in _cores(cpu)))
    last = next((q for q in reversed(queue) if q.get("jobs_done") is not None), {})
    print("  engine: " + ", ".join(f"{k} {last.get(k)}" for k in ENGINE_COUNTS)
          + "; seconds running, by kind (samples): " + ", ".join(
              f"{kind} {n}" for kind, n in _running_by_kind(queue).items()))
    print(f"  RSS MiB web / worker: before {before.get('web_mib')} / {before.get('worker_mib')}, "
          f"during max {rss.get('during_max', {}).get('web_mib')} / "
          f"{rss.get('during_max', {}).get('worker_mib')}, after {after.get('web_mib')} / "
          f"{after.get('worker_mib')} ({after.get('when')}; web growth {_pct(web_growth)})")
    print(f"  targets met: {met}; errors: {len(result['errors'])}; server log tracebacks: "
          f"{result['server_log_tracebacks']}; never showed a number: "
          f"{result['first_number']['never']}")
    print(f"  saved {out.relative_to(ROOT)}")
    return 0 if all(met.values()) else 1


def arrival_timeline(students: list[Student]) -> dict:
    """Where a student's wait for its first number went: the page received (pulled; pull_cpu is
    the student's own CPU seconds in it), the ready event and the skip sent, the first number;
    each as seconds after opening."""
    steps = {"pulled": "pulled_s", "pull_cpu": "pull_cpu_s", "ready_sent": "ready_s",
             "skip_sent": "skip_s", "first_number": "first_number_s"}
    out = {name: summary([getattr(s, a) for s in students if getattr(s, a) is not None])
           for name, a in steps.items()}
    out["skip_to_number"] = summary([s.first_number_s - s.skip_s for s in students
                                     if s.first_number_s is not None and s.skip_s is not None])
    return out


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
