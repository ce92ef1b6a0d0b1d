"""The class bench's readers: the lessons they open (MIX), the cohort of simulated students
(bench/lab/students.py) and their visits, and the Chromium reader who arrives every so often
(bench/lab/classroom.py)."""

from __future__ import annotations

import os
import random
import threading
import time

from bench.lab.bokeh_students import BokehStudent, deep_client_stacks
from bench.lab.proc_cpu import descendants, lowest_priority_sessions
from bench.lab.students import SHOWN, ProtocolStudent, StudentLoop
from bench.web.served_app import CHROMIUM, CHROMIUM_ARGS, SKIP_PREDICTION

WAIT_S = 120.0  # the most any one reader waits for anything

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
