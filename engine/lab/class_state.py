"""The class run as the web side sees it: what the worker's class_run job reported, gathered
into what the teacher's console draws (`snapshot`), and each student's request's events handed
to the callback that sent it. Torch-free; thread-safe (one lock; callbacks run outside it).

The job sends one "class" event per turn of its loop (engine.serve.class_run): a list of plain
events (ready, arrived, admitted, token, finished, dropped, step, knob, knob_refused, ended) and
the run's state (in flight, waiting, KV blocks). Times are the run's: seconds since its start on
time.monotonic(), which every process of the machine shares, so `now` is the run's time here too.

The per-student bound on requests a minute is kept here, before anything reaches the engine.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable

log = logging.getLogger(__name__)

KEEP_STEPS = 20_000  # steps kept for snapshots (minutes of a busy run)
KEEP_REQUESTS = 20_000  # requests kept; the oldest ended ones go first
RATE_WINDOW_S = 60.0
TOKENS_WINDOW_S = 5.0  # tokens_per_s is over this many seconds
NOT_LIVE = "The class run is not live: wait for the teacher to start it."
ENDED = "The class run ended before this request finished."

OnEvent = Callable[[dict], None]


class ClassState:
    """One class run's state on the web side (see the module docstring)."""

    def __init__(self, settings: dict):
        self.lock = threading.Lock()
        self.settings = dict(settings)
        self.active = True  # from the start until it ends (stopped, failed)
        self.ready = False  # the worker's run has started (its clock is known)
        self.start_mono: float | None = None
        self.run_id: int | None = None
        self.pending: list[dict] = []  # messages for the run, sent once it is ready
        self.knob_changes: list[dict] = []
        self.steps: deque[dict] = deque(maxlen=KEEP_STEPS)
        self.requests: dict[str, dict] = {}
        self.callbacks: dict[str, OnEvent] = {}
        self.sent: dict[str, deque[float]] = {}  # each student's send times (monotonic)
        self.state = {"in_flight": 0, "waiting": 0, "kv_blocks_used": 0, "kv_blocks_total": 0}
        self.info: dict = {}  # the ready event: device, preset, engine limits
        self.summary: dict | None = None
        self.error: str | None = None
        self._ids = 0

    def now(self) -> float:
        """The run's time now (0 before it started)."""
        return 0.0 if self.start_mono is None else time.monotonic() - self.start_mono

    # ---- a student's request ---------------------------------------------------------------------
    def admit(self, student: str, prompt: str, max_tokens: int,
              on_event: OnEvent | None) -> tuple[str | None, str | None]:
        """Check a request against the bounds kept here and record it: (its id, None), or
        (None, the reason it is refused)."""
        with self.lock:
            reason = self._refusal(student, prompt, max_tokens)
            if reason is not None:
                return None, reason
            self.sent.setdefault(student, deque()).append(time.monotonic())
            self._ids += 1
            name = f"s{self._ids}"
            if on_event is not None:
                self.callbacks[name] = on_event
            self.requests[name] = self._record(name, student, False, None)
            return name, None

    def _refusal(self, student: str, prompt: str, max_tokens: int) -> str | None:
        if not self.active:
            return NOT_LIVE
        if not isinstance(student, str) or not student:
            return "Who sent this is unknown: reload the page."
        if not isinstance(prompt, str) or not prompt.strip():
            return "The prompt is empty: write something first."
        cap = self.settings["max_tokens"]
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) \
                or not 1 <= max_tokens <= cap:
            return f"Ask for 1 to {cap} new tokens (asked for {max_tokens!r})."
        chars = 16 * self.settings["max_prompt_tokens"]  # no token is longer than this
        if len(prompt) > chars:
            return (f"The prompt is {len(prompt)} characters long; the class run takes prompts "
                    f"of at most {self.settings['max_prompt_tokens']} tokens.")
        per_min = self.settings["per_student_per_min"]
        times = self.sent.get(student)
        if times is not None:
            now = time.monotonic()
            while times and times[0] <= now - RATE_WINDOW_S:
                times.popleft()
            if len(times) >= per_min:
                wait = times[0] + RATE_WINDOW_S - now
                return (f"You have sent {per_min} requests in the last minute, the most the "
                        f"class run takes from one student: try again in {wait:.0f} s.")
        return None

    @staticmethod
    def _record(name: str, student: str, background: bool, arrival_s: float | None) -> dict:
        return {"id": name, "student": student, "background": background,
                "arrival_s": arrival_s, "first_token_s": None, "finish_s": None,
                "ttft_ms": None, "itl_ms": [], "output_len": 0, "dropped": None,
                "arrival_step": None, "admitted_step": None, "changed_s": 0.0}

    # ---- what the job reports --------------------------------------------------------------------
    def on_job_event(self, event) -> None:
        """A JobEvent of the class_run job (on the service's thread)."""
        if event.type == "class":
            calls = self._take(event.data)
        elif event.type in ("result", "error", "cancelled"):
            calls = self._ended(event)
        else:
            return
        for callback, payload in calls:
            try:
                callback(payload)
            except Exception:  # a page's callback must not stop the others
                log.exception("a class request's callback failed")

    def _take(self, data: dict) -> list[tuple[OnEvent, dict]]:
        calls: list[tuple[OnEvent, dict]] = []
        with self.lock:
            for e in data.get("events", ()):
                kind = e.get("type")
                handler = getattr(self, f"_on_{kind}", None)
                if handler is not None:
                    handler(e, calls)
            state = data.get("state")
            if state:
                self.state = {k: state[k] for k in self.state}
            self._trim()
        return calls

    def _on_ready(self, e: dict, calls: list) -> None:
        self.ready = True
        self.start_mono = e["start_mono"]
        self.info = {k: e[k] for k in ("device", "preset", "kv_blocks_total", "max_batch_limit")}
        self.settings.update(e["settings"])

    def _on_arrived(self, e: dict, calls: list) -> None:
        rec = self.requests.get(e["id"])
        if rec is None:  # the background load's
            rec = self.requests[e["id"]] = self._record(e["id"], e["student"], e["background"],
                                                        None)
        rec["arrival_s"] = e["arrival_s"]
        rec["arrival_step"] = e["step"]  # the index of the next step when it arrived
        rec["changed_s"] = e["arrival_s"]

    def _on_admitted(self, e: dict, calls: list) -> None:
        rec = self.requests.get(e["id"])
        if rec is not None:
            rec["changed_s"] = e["t_s"]
            if rec["admitted_step"] is None:  # the step it first ran in
                rec["admitted_step"] = e["step"]
            self._call(calls, e["id"], {"type": "admitted", "t_s": e["t_s"], "step": e["step"]})

    def _on_token(self, e: dict, calls: list) -> None:
        rec = self.requests.get(e["id"])
        if rec is None:
            return
        t = e["t_s"]
        if rec["first_token_s"] is None:
            rec["first_token_s"] = t
            rec["ttft_ms"] = 1000 * (t - rec["arrival_s"]) if rec["arrival_s"] is not None \
                else None
        else:
            rec["itl_ms"].append(1000 * (t - rec["_last_s"]))
        rec["_last_s"] = t
        rec["output_len"] += 1
        rec["changed_s"] = t
        self._call(calls, e["id"], {"type": "token", "text": e["text"], "t_s": t})

    def _on_finished(self, e: dict, calls: list) -> None:
        rec = self.requests.get(e["id"])
        if rec is None:
            return
        rec.update(finish_s=e["t_s"], ttft_ms=e["ttft_ms"], itl_ms=list(e["itl_ms"]),
                   output_len=e["output_len"], changed_s=e["t_s"])
        self._call(calls, e["id"], {"type": "finished", "ttft_ms": e["ttft_ms"],
                                    "itl_ms": list(e["itl_ms"]), "output_len": e["output_len"],
                                    "t_s": e["t_s"]}, last=True)

    def _on_dropped(self, e: dict, calls: list) -> None:
        rec = self.requests.get(e["id"])
        if rec is not None:
            rec["dropped"] = e["reason"]
            rec["changed_s"] = self.now()
        self._call(calls, e["id"], {"type": "dropped", "reason": e["reason"]}, last=True)

    def _on_step(self, e: dict, calls: list) -> None:
        self.steps.append({"t_s": e["t_s"], "index": e["index"], "batch": e["batch"],
                           "prefill_tokens": e["prefill_tokens"], "tokens": e["tokens"],
                           "kv_blocks_used": e["kv_blocks_used"]})

    def _on_knob(self, e: dict, calls: list) -> None:
        self.knob_changes.append({"t_s": e["t_s"], "step": e["step"],
                                  "changes": dict(e["changes"]), "by": e["by"]})
        self.settings.update(e["changes"])

    def _on_knob_refused(self, e: dict, calls: list) -> None:
        log.warning("the class run refused a knob change %s: %s", e.get("changes"),
                    e.get("reason"))

    def _call(self, calls: list, name: str, payload: dict, last: bool = False) -> None:
        callback = self.callbacks.pop(name, None) if last else self.callbacks.get(name)
        if callback is not None:
            calls.append((callback, payload))

    def _ended(self, event) -> list[tuple[OnEvent, dict]]:
        """The job ended: its summary (a result), or an error, or it was cancelled. Every
        request still waiting for its end is dropped."""
        with self.lock:
            self.active = False
            if event.type == "result":
                self.summary = dict(event.data)
            elif event.type == "error":
                self.error = event.data.get("message", "the class run failed")
            reason = ENDED if event.type != "error" else f"The class run failed: {self.error}"
            calls = [(cb, {"type": "dropped", "reason": reason}) for cb in self.callbacks.values()]
            self.callbacks.clear()
        return calls

    def _trim(self) -> None:
        """Keep at most KEEP_REQUESTS requests: the oldest ended ones go."""
        excess = len(self.requests) - KEEP_REQUESTS
        if excess <= 0:
            return
        for name in [n for n, r in self.requests.items()
                     if r["finish_s"] is not None or r["dropped"]][:excess]:
            del self.requests[name]

    # ---- what the console draws ------------------------------------------------------------------
    def snapshot(self, since_s: float = 0.0) -> dict:
        with self.lock:
            now = self.now()
            recent = [s for s in self.steps if s["t_s"] > now - TOKENS_WINDOW_S]
            window = min(TOKENS_WINDOW_S, now) if now > 0 else 0.0
            tokens_per_s = sum(s["tokens"] for s in recent) / window if window > 0 else 0.0
            return {
                "active": self.active, "ready": self.ready, "t_s": now,
                "settings": dict(self.settings),
                "knob_changes": [dict(k, changes=dict(k["changes"]))
                                 for k in self.knob_changes],
                **self.state,
                "tokens_per_s": tokens_per_s,
                "steps": [{k: s[k] for k in ("t_s", "batch", "prefill_tokens",
                                             "kv_blocks_used", "index")}
                          for s in self.steps if s["t_s"] >= since_s],
                "requests": [{k: v for k, v in r.items() if not k.startswith("_")
                              and k != "changed_s"} | {"itl_ms": list(r["itl_ms"])}
                             for r in self.requests.values() if r["changed_s"] >= since_s],
                **({"error": self.error} if self.error else {}),
            }
