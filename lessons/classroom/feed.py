"""The class run as the pages draw it: the service's snapshots merged into one record that every
console and student session of this server reads.

The service answers `class_snapshot(since_s)` with what changed since a run time (engine.lab's
class-run API). One ClassFeed per server polls it at most once a POLL_S, however many sessions
ask, and keeps: the requests (by id, the latest state of each), the steps, one point per poll of
the gauges (in flight, waiting, KV blocks, tokens per second) and of the tail (TTFT and ITL P50
and P99 over the last TAIL_WINDOW_S), and the knob changes. Sessions read what is new to them by
absolute index (`steps_from`, `points_from`), so each streams only new rows into its charts.
A new run (the service's run time going back, or a start after a stop) starts a new record,
`run` counts them, and sessions clear their charts when it changes.

`ingest(snapshot)` is pure bookkeeping on plain dicts (tested without an engine); `poll(service)`
is the one place that calls the service.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping

import numpy as np

POLL_S = 1.0  # the console draws a frame a second at most; polling faster shows nothing new
TAIL_WINDOW_S = 10.0  # P50 and P99 over time: over the requests of the last ten seconds
MAX_REQUESTS = 5000  # the oldest finished requests are dropped beyond this (an hour of class)
MAX_ROWS = 20000  # steps and points kept (older ones are dropped from the front)

KNOB_NAMES = ("policy", "max_batch", "chunk_size", "prefix_cache", "background_rps", "lanes")


def describe_change(changes: Mapping) -> str:
    """A knob change in plain words: "chunked prefill off, max batch 8"."""
    words = []
    for name, value in changes.items():
        if name == "policy":
            words.append(f"policy {value}")
        elif name == "max_batch":
            words.append(f"max batch {value}")
        elif name == "chunk_size":
            words.append("chunked prefill off" if not value else
                         f"chunked prefill on ({value} tokens a step)")
        elif name == "prefix_cache":
            words.append(f"prefix cache {'on' if value else 'off'}")
        elif name == "background_rps":
            words.append(f"background load {float(value):g} requests/s")
        elif name == "lanes":
            words.append("lanes on (students before the background load)" if value else
                         "lanes off (one queue)")
        else:
            words.append(f"{name} {value}")
    return ", ".join(words) or "no change"


def percentiles(values) -> tuple[float, float]:
    """(P50, P99) of the values, numpy's linear percentiles (the engine's); NaN when none."""
    data = np.asarray([v for v in values if v is not None], dtype=float)
    if data.size == 0:
        return float("nan"), float("nan")
    return float(np.percentile(data, 50)), float(np.percentile(data, 99))


class ClassFeed:
    """Every snapshot of the class run merged, for all sessions of this server (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._polled = -float("inf")  # time.monotonic() of the last poll
        self.error: str | None = None  # the last poll's failure, in one line
        self._new_run(active=False)
        self.run = 0

    def _new_run(self, active: bool) -> None:
        self.run = getattr(self, "run", 0) + 1
        self.active = active
        self.ready = False  # the engine of the live run is built and stepping
        self.run_error: str | None = None  # what the run reported going wrong, one line
        self.t_s = 0.0
        self.settings: dict = {}
        self.knob_changes: list[dict] = []
        self.requests: dict[str, dict] = {}  # id -> the latest row, in order of first sight
        self.steps: list[dict] = []
        self.steps_base = 0  # absolute index of steps[0]
        self.points: list[dict] = []
        self.points_base = 0
        self.gauges: dict = {"in_flight": 0, "waiting": 0, "kv_blocks_used": 0,
                             "kv_blocks_total": 0, "tokens_per_s": 0.0}
        self._since = 0.0
        self.version = 0  # counts merged snapshots: a session with this version has drawn it
        self._by_student: dict[str, list[str]] = {}
        self._hist: tuple[int, dict] | None = None

    # ---- merging ---------------------------------------------------------------------------
    def ingest(self, snap: Mapping) -> None:
        """Merge one snapshot (the shape class_snapshot returns)."""
        with self._lock:
            active = bool(snap.get("active"))
            t_s = float(snap.get("t_s") or 0.0)
            if (active and not self.active) or (active and t_s + 1e-9 < self.t_s):
                self._new_run(active=True)
            self.active = active
            self.ready = bool(snap.get("ready", active))
            self.run_error = snap.get("error") or None
            if not active and not snap.get("steps") and not snap.get("requests"):
                return  # no run live: keep the last one's record on show
            self.t_s = max(self.t_s, t_s)
            self.settings = dict(snap.get("settings") or self.settings)
            changes = list(snap.get("knob_changes") or [])
            if len(changes) >= len(self.knob_changes):
                self.knob_changes = [dict(c) for c in changes]
            for key in self.gauges:
                if snap.get(key) is not None:
                    self.gauges[key] = snap[key]
            last = self.steps[-1]["t_s"] if self.steps else -1.0
            self.steps.extend(dict(s) for s in snap.get("steps") or [] if s["t_s"] > last)
            for r in snap.get("requests") or []:
                rid = str(r["id"])
                if rid not in self.requests and r.get("student") is not None:
                    self._by_student.setdefault(str(r["student"]), []).append(rid)
                self.requests[rid] = {**self.requests.get(rid, {}), **r}
            self.version += 1
            self._add_point()
            self._trim()
            self._since = self.t_s

    def _add_point(self) -> None:
        if self.points and self.points[-1]["t_s"] >= self.t_s:
            return
        start = self.t_s - TAIL_WINDOW_S
        recent = [r for r in self.requests.values()
                  if r.get("first_token_s") is not None and r["first_token_s"] >= start]
        ttft = percentiles(r.get("ttft_ms") for r in recent)
        itl = percentiles(g for r in recent for g in r.get("itl_ms") or [])
        self.points.append({"t_s": self.t_s, **{k: float(v) for k, v in self.gauges.items()},
                            "ttft_p50": ttft[0], "ttft_p99": ttft[1],
                            "itl_p50": itl[0], "itl_p99": itl[1]})

    def _trim(self) -> None:
        if len(self.steps) > MAX_ROWS:
            cut = len(self.steps) - MAX_ROWS
            del self.steps[:cut]
            self.steps_base += cut
        if len(self.points) > MAX_ROWS:
            cut = len(self.points) - MAX_ROWS
            del self.points[:cut]
            self.points_base += cut
        if len(self.requests) > MAX_REQUESTS:
            done = [k for k, r in self.requests.items() if r.get("finish_s") is not None]
            gone = set(done[:len(self.requests) - MAX_REQUESTS])
            for k in gone:
                del self.requests[k]
            self._by_student = {s: [i for i in ids if i not in gone]
                                for s, ids in self._by_student.items()}

    # ---- reading ---------------------------------------------------------------------------
    def steps_from(self, index: int) -> tuple[list[dict], int]:
        """The steps from absolute index `index` on, and the index after them."""
        with self._lock:
            start = max(index - self.steps_base, 0)
            return self.steps[start:], self.steps_base + len(self.steps)

    def points_from(self, index: int) -> tuple[list[dict], int]:
        """The gauge and tail points from absolute index `index` on, and the index after them."""
        with self._lock:
            start = max(index - self.points_base, 0)
            return self.points[start:], self.points_base + len(self.points)

    def request_rows(self) -> list[dict]:
        """Every request kept, oldest first (copies)."""
        with self._lock:
            return [dict(r) for r in self.requests.values()]

    def rows_of(self, student: str | None) -> list[dict]:
        """One student's requests kept, oldest first (copies)."""
        with self._lock:
            ids = self._by_student.get(str(student), []) if student is not None else []
            return [dict(self.requests[i]) for i in ids if i in self.requests]

    def recent_rows(self, window_s: float) -> list[dict]:
        """The requests not finished before the last `window_s` of run time (copies)."""
        with self._lock:
            start = self.t_s - window_s
            return [dict(r) for r in self.requests.values()
                    if r.get("finish_s") is None or r["finish_s"] >= start]

    def latencies(self) -> dict[str, np.ndarray]:
        """Everyone's TTFTs and gaps between tokens (ms), computed once per merged snapshot
        for every session of the server."""
        with self._lock:
            if self._hist is None or self._hist[0] != self.version:
                rows = self.requests.values()
                self._hist = (self.version, {
                    "ttft": np.asarray([r["ttft_ms"] for r in rows
                                        if r.get("ttft_ms") is not None], dtype=float),
                    "itl": np.asarray([g for r in rows for g in r.get("itl_ms") or []],
                                      dtype=float)})
            return self._hist[1]

    def changes(self) -> list[dict]:
        with self._lock:
            return [dict(c) for c in self.knob_changes]

    # ---- the service -----------------------------------------------------------------------
    def poll(self, service, force: bool = False) -> bool:
        """Ask the service for what changed, unless another session did within POLL_S; whether
        this call asked. A failure is kept in `error` (one line), never raised to a page."""
        with self._lock:
            now = time.monotonic()
            if not force and now - self._polled < POLL_S:
                return False
            self._polled = now
            since = self._since
        try:
            snap = service.class_snapshot(since_s=since)
        except Exception as e:  # the pages keep drawing the last record and say why
            self.error = f"{type(e).__name__}: {e}".splitlines()[0]
            return True
        self.error = None
        self.ingest(snap)
        return True


_feed: ClassFeed | None = None
_feed_lock = threading.Lock()


def class_feed() -> ClassFeed:
    """The one feed of this server."""
    global _feed
    with _feed_lock:
        if _feed is None:
            _feed = ClassFeed()
        return _feed
