"""The class bench's server side: the served app's cache set up as a class's machine, its
/engine-status, its memory once it has trimmed after closed sessions, its log's tracebacks, and
which processes' CPU the report shows (bench/lab/classroom.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request

from bench.lab.proc_cpu import descendants
from bench.web.served_app import ROOT, rss_mib

RESULTS = ROOT / "bench" / "results"


def rounded(x: float | None, digits: int = 2) -> float | None:
    return None if x is None else round(x, digits)


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
    return {"web_mib": rounded(rss_mib(server_pid)), "worker_mib": rounded(rss_mib(worker_pid))}


# /engine-status counters kept with each sample; gap_fills: points the service sent into a
# running load test's or schedule run's idle gaps (engine.lab.client _fill)
ENGINE_COUNTS = ("jobs_done", "cache_hits", "shared_runs", "preemptions", "jobs_cancelled",
                 "disturbed", "remeasured", "gap_fills")



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
