"""The class run: one live engine run that a classroom's requests join while it goes on, driven
like the online server (serve/online.py) through the step loop (serve/loop.EngineLoop).

Whoever drives it (the lab's class_run job, engine.lab.jobs.classroom) hands it messages
between two steps (`handle`): a student's request ("send"), a change of the live knobs ("set",
serve/class_knobs.py), or "stop". `run` loops: take the messages, add the background load's
arrivals, let waiting requests into the engine by per-student fair share (serve/class_fair.py),
run one step, and hand what happened to `emit` as one batch of plain events per turn of the loop
(admitted, token, finished, dropped, the step, a knob change, the run's state). A knob change is
applied before the next step and recorded with that step's index and the run time.

Requests enter the engine's scheduler only as it has room for them (a free slot for the
continuous policy, an empty batch for static and dynamic), so the order in which waiting
requests are admitted is the fair share's: a student's one request waits for one request to
end, never for another student's fifty. With lanes on (class_knobs: the engine's traffic
classes, the students' requests in an interactive lane with strict priority over the background
load's batch lane, which holds at most half the slots), the fair share orders the students among
themselves, and their room leaves out the background requests waiting in the scheduler (the
engine puts a student's first anyway); a background request enters the scheduler only when a
slot is free and its lane is under its share, so none sits there waiting on the lane's cap.
Bounds (prompt tokens, new tokens, what the engine can hold) are checked here when a request
arrives; one over a bound is dropped with a plain reason.

Time is time.monotonic() minus the run's start (the same clock in every process of the machine,
so the lab's service stamps a request's arrival when the student sent it). The run is live: the
clock never stops, so a short job run in an idle gap (`fill`) delays a request that arrives
meanwhile, and that shows in its time to first token.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from ..errors import ConfigError
from ..llm_engine import LLMEngine
from ..sampler import SamplingParams
from .class_fair import FairQueue
from .class_knobs import BATCH, INTERACTIVE, ClassSettings, apply, batch_lane_slots, changed
from .loop import FILL_MIN_S, POLL_S, EngineLoop, check_request
from .trace import Event, RequestEvent, RequestTrace, StepTrace, TokenEvent
from .workload import PromptSource, Request

BACKGROUND = "background"  # the synthetic load's "student"
BACKGROUND_PROMPT = (16, 64)  # its prompts' lengths in tokens (uniform)
BACKGROUND_OUTPUT = (16, 48)  # its new tokens (uniform, capped by max_tokens)
IDLE_FILL_S = 0.5  # an idle run with no known next arrival offers gaps this long
TEMPERATURE = 0.8  # students' texts are sampled, so thirty of the same prompt differ


@dataclass
class _Req:
    """A request of the run: who sent it, its trace once in the engine."""

    name: str
    student: str
    background: bool
    request: Request
    trace: RequestTrace | None = None


@dataclass
class Summary:
    """What the run did, for its result (engine.lab.results.ClassRunResult)."""

    students: set[str] = field(default_factory=set)
    sent: int = 0
    background: int = 0
    finished: int = 0
    dropped: int = 0
    output_tokens: int = 0
    ttft_ms: list[float] = field(default_factory=list)
    itl_ms: list[float] = field(default_factory=list)


class ClassRun:
    """A live run under ClassSettings; see the module docstring. One thread drives it."""

    def __init__(self, engine: LLMEngine, settings: ClassSettings,
                 emit: Callable[[dict], None], seed: int = 0, start: float | None = None):
        settings.validate()
        engine.warm_up()  # before the run's clock starts
        self.engine = engine
        self.settings = settings
        self.emit = emit
        self.start = time.monotonic() if start is None else start
        self.loop = EngineLoop(engine, settings.scheduler_config(), self.clock, self._on_event,
                               stream_text=True, keep_steps=0)
        self.fair = FairQueue()
        self.requests: dict[int, _Req] = {}  # by engine id: sent, not yet ended
        self.by_name: dict[str, int] = {}
        self.knob_changes: list[dict] = []
        self.summary = Summary()
        self.stopped = False
        self._ids = 0
        self._step_tokens = 0  # output tokens of the step running now
        self._background_ids: set[int] = set()  # the background load's, until seen ended
        self._out: list[dict] = []  # this turn's events
        self._rng = np.random.default_rng(seed)
        self._prompts = PromptSource(engine.tokenizer)
        self._prefix_cache_at_start = engine.blocks.prefix_caching
        self._next_background: float | None = None
        self._schedule_background(self.clock())
        if settings.prefix_cache != engine.blocks.prefix_caching:
            engine.blocks.set_prefix_caching(settings.prefix_cache)

    def clock(self) -> float:
        return time.monotonic() - self.start

    # ---- messages from the driver ------------------------------------------------------------
    def handle(self, message: dict) -> None:
        """One message: {"op": "send", "id", "student", "prompt", "max_tokens", "sent"}
        ("sent": time.monotonic() when the student sent it), {"op": "set", "changes", "by"},
        or {"op": "stop"}."""
        op = message.get("op")
        if op == "send":
            self.send(message["id"], message["student"], message["prompt"],
                      message["max_tokens"], message.get("sent"))
        elif op == "set":
            self.set(message["changes"], message.get("by", "teacher"))
        elif op == "stop":
            self.stopped = True

    def send(self, name: str, student: str, prompt: str, max_tokens: int,
             sent: float | None = None) -> bool:
        """A student's request arrives; False (and a "dropped" event with the reason) if it is
        over a bound."""
        arrival = self.clock() if sent is None else max(0.0, sent - self.start)
        ids = self.engine.tokenizer.encode(prompt) if prompt else []
        reason = self._over_bound(ids, max_tokens)
        request = Request(self._next_id(), ids, max_tokens, arrival, stop_at_eos=True,
                          sampling=SamplingParams(temperature=TEMPERATURE,
                                                  seed=int(self._rng.integers(2**31))),
                          traffic_class=INTERACTIVE)
        if reason is None:
            try:
                check_request(self.engine, request, self.loop.config, label="")
            except ConfigError as e:
                reason = str(e)
        if reason is not None:
            self.summary.dropped += 1
            self._out.append({"type": "dropped", "id": name, "reason": reason})
            return False
        self.summary.sent += 1
        self.summary.students.add(student)
        self._enqueue(_Req(name, student, False, request))
        return True

    def _over_bound(self, ids: list[int], max_tokens: int) -> str | None:
        s = self.settings
        if not ids:
            return "The prompt is empty: write something first."
        if len(ids) > s.max_prompt_tokens:
            return (f"The prompt is {len(ids)} tokens long; the class run takes prompts of at "
                    f"most {s.max_prompt_tokens} tokens.")
        if not 1 <= max_tokens <= s.max_tokens:
            return f"Ask for 1 to {s.max_tokens} new tokens (asked for {max_tokens})."
        return None

    def set(self, changes: dict, by: str = "teacher") -> dict:
        """Apply live knob changes from the next step; the knob event recorded. ConfigError
        for a bad change (nothing changes then)."""
        old = self.settings
        new = changed(old, changes)
        self._background_arrivals()  # those due before the change came at the old rate
        preempted = apply(self.loop, old, new)
        for seq_id in preempted:
            req = self.requests.get(seq_id)
            if req is not None and req.trace is not None:
                req.trace.preemptions += 1
        self.settings = new
        if new.background_rps != old.background_rps:
            self._schedule_background(self.clock())
        event = {"type": "knob", "t_s": self.clock(), "step": self.loop.step_count,
                 "changes": dict(changes), "by": by, "preempted": len(preempted)}
        self.knob_changes.append(event)
        self._out.append(event)
        return event

    # ---- the loop ----------------------------------------------------------------------------
    def run(self, inbox: Callable[[float], list[dict]], cancelled: Callable[[], bool],
            fill: Callable[[float], float] | None = None) -> dict:
        """Serve until a "stop" message or cancelled(); returns the summary (to_json).
        inbox(timeout_s) returns the messages that came (waiting at most timeout_s for one)."""
        self._out.append(self.ready())
        self._flush()
        try:
            while not self.stopped:
                if cancelled():
                    break
                for message in inbox(0.0):
                    self._handle_safely(message)
                if self.stopped:
                    break
                self._background_arrivals()
                self._admit()
                step = self.loop.step(more_coming=len(self.fair) > 0)
                if step is None:
                    self._flush()
                    self._idle(inbox, fill)
                    continue
                self._stepped(step)
                self._flush()
        finally:
            self._end()
        return self.to_json()

    def ready(self) -> dict:
        """The first event: the run's clock and what the engine holds."""
        return {"type": "ready", "start_mono": self.start, "t_s": self.clock(),
                "settings": self.settings.to_json(), "device": self.engine.device,
                "preset": self.engine.model_config.name,
                "kv_blocks_total": self.engine.blocks.num_blocks,
                "max_batch_limit": self.engine.config.max_batch}

    def _handle_safely(self, message: dict) -> None:
        try:
            self.handle(message)
        except ConfigError as e:  # the service checked it; the engine's own limits remain
            self._out.append({"type": "knob_refused", "t_s": self.clock(), "reason": str(e),
                              "changes": message.get("changes")})

    def _idle(self, inbox: Callable[[float], list[dict]],
              fill: Callable[[float], float] | None) -> None:
        """Nothing to run now: lend the gap to a short job when the engine is empty, else wait
        for a message (at most until the next background arrival or the scheduler's
        wake-up)."""
        now = self.clock()
        wakeups = [t for t in (self._next_background, self.loop.next_wakeup()) if t is not None]
        ahead = max(0.0, min(wakeups) - now) if wakeups else None
        if fill is not None and not self.loop.has_work and not self.fair:
            gap = IDLE_FILL_S if ahead is None else ahead
            if gap >= FILL_MIN_S and fill(gap):
                return
        for message in inbox(POLL_S if ahead is None else min(ahead, POLL_S)):
            self._handle_safely(message)

    def _admit(self) -> None:
        """Let waiting requests into the scheduler as it has room (fair share's order); with
        lanes on, the students' first and the background's within its lane's share (module
        docstring)."""
        scheduler, config = self.loop.scheduler, self.loop.config
        if config.policy != "continuous" and scheduler.running:
            return  # a static batch runs to its end; the next one is picked when it has
        room = config.max_batch - len(scheduler.running) - len(scheduler.waiting)
        if config.traffic is None:
            self._feed(room)
            return
        lane = scheduler.traffic_class
        batch_running = sum(1 for s in scheduler.running if lane(s.id) == BATCH)
        batch_waiting = sum(1 for s in scheduler.waiting if lane(s.id) == BATCH)
        fed = self._feed(room + batch_waiting, among=lambda student: student != BACKGROUND)
        self._feed(min(room - fed, batch_lane_slots(config.max_batch) - batch_running
                       - batch_waiting), among=lambda student: student == BACKGROUND)

    def _feed(self, room: int, among: Callable[[str], bool] | None = None) -> int:
        """Up to `room` waiting requests into the scheduler, by fair share (among some students
        only, if given); returns how many went."""
        fed = 0
        while fed < room:
            picked = self.fair.pop(among)
            if picked is None:
                break
            req = picked[2]
            req.trace = self.loop.add(req.request, req.request.arrival_s)
            fed += 1
        return fed

    def _stepped(self, step: StepTrace) -> None:
        rows = [*step.decode_ids, *(seq_id for seq_id, _ in step.prefill_chunks)]
        background = [seq_id for seq_id in rows if seq_id in self._background_ids]
        self._background_ids.difference_update(i for i in background if i not in self.requests)
        self._out.append({"type": "step", "index": step.index, "start_s": step.start_s,
                          "t_s": step.end_s, "batch": step.running,
                          "prefill_tokens": step.prefill_tokens, "decode": step.decode_seqs,
                          "background": len(background), "tokens": self._step_tokens,
                          "kv_blocks_used": step.kv_blocks_used})
        self._step_tokens = 0

    def _on_event(self, event: Event) -> None:
        """Inside a step: each request's admission, tokens and end, as plain events."""
        if isinstance(event, TokenEvent):
            req = self.requests.get(event.request_id)
            if req is None:
                return
            self._step_tokens += 1
            self.fair.served(req.student)
            self._out.append({"type": "token", "id": req.name,
                              "text": "" if req.background else (event.text or ""),
                              "t_s": event.t_s})
        elif isinstance(event, RequestEvent):
            req = self.requests.get(event.request_id)
            if req is None:
                return
            if event.kind == "admitted":
                self._out.append({"type": "admitted", "id": req.name, "t_s": event.t_s,
                                  "step": self.loop.step_count})
            elif event.kind == "finished":
                self._finished(event.request_id, req)

    def _finished(self, seq_id: int, req: _Req) -> None:
        trace = req.trace
        ttft = 1000 * (trace.first_token_s - trace.arrival_s)
        itl = [1000 * (b - a) for a, b in zip(trace.token_s, trace.token_s[1:])]
        s = self.summary
        s.finished += 1
        s.output_tokens += len(trace.token_s)
        s.ttft_ms.append(ttft)
        s.itl_ms.extend(itl)
        self._out.append({"type": "finished", "id": req.name, "ttft_ms": ttft, "itl_ms": itl,
                          "output_len": len(trace.token_s), "t_s": trace.finish_s})
        self._forget(seq_id, req)

    def _forget(self, seq_id: int, req: _Req) -> None:
        self.requests.pop(seq_id, None)
        self.by_name.pop(req.name, None)
        if req.trace is not None:  # in the engine
            self.fair.done(req.student)
        else:
            self.fair.remove(req.student, seq_id)

    def _enqueue(self, req: _Req) -> None:
        seq_id = req.request.id
        self.requests[seq_id] = req
        self.by_name[req.name] = seq_id
        self.fair.push(req.student, seq_id, req)
        self._out.append({"type": "arrived", "id": req.name, "student": req.student,
                          "background": req.background, "arrival_s": req.request.arrival_s,
                          "prompt_tokens": len(req.request.prompt_ids),
                          "step": self.loop.step_count})

    def _next_id(self) -> int:
        self._ids += 1
        return self._ids

    # ---- the background load -----------------------------------------------------------------
    def _schedule_background(self, now: float) -> None:
        rate = self.settings.background_rps
        self._next_background = (now + float(self._rng.exponential(1 / rate)) if rate > 0
                                 else None)

    def _background_arrivals(self) -> None:
        """Poisson arrivals at the background rate, up to now, each one more request of the
        background "student"."""
        now = self.clock()
        while self._next_background is not None and self._next_background <= now:
            arrival = self._next_background
            self.add_background(arrival)
            self._next_background = arrival + float(
                self._rng.exponential(1 / self.settings.background_rps))

    def add_background(self, arrival: float | None = None) -> str:
        """One more request of the background "student", arriving at `arrival` (run time; now
        when None): a prompt of BACKGROUND_PROMPT tokens and BACKGROUND_OUTPUT new tokens (at
        most max_tokens), end-of-text ignored. Returns its name."""
        arrival = self.clock() if arrival is None else arrival
        prompt = self._prompts.prompt(int(self._rng.integers(*BACKGROUND_PROMPT)), self._rng)
        hi = max(2, min(BACKGROUND_OUTPUT[1], self.settings.max_tokens + 1))
        output = int(self._rng.integers(min(BACKGROUND_OUTPUT[0], hi - 1), hi))
        request = Request(self._next_id(), prompt, output, arrival, traffic_class=BATCH)
        self._background_ids.add(request.id)
        self.summary.background += 1
        req = _Req(f"bg{request.id}", BACKGROUND, True, request)
        self._enqueue(req)
        return req.name

    # ---- the state and the end ---------------------------------------------------------------
    def state(self) -> dict:
        scheduler = self.loop.scheduler
        return {"type": "state", "t_s": self.clock(), "in_flight": len(scheduler.running),
                "waiting": len(scheduler.waiting) + len(self.fair),
                "kv_blocks_used": self.engine.blocks.num_used,
                "kv_blocks_total": self.engine.blocks.num_blocks}

    def _flush(self) -> None:
        if self._out:
            events, self._out = self._out, []
            self.emit({"events": events, "state": self.state()})

    def _end(self) -> None:
        """Drop what is left, give every block back and the engine its prefix cache setting."""
        for seq_id, req in list(self.requests.items()):
            self.summary.dropped += 1
            self._out.append({"type": "dropped", "id": req.name,
                              "reason": "The class run ended before this request finished."})
            self._forget(seq_id, req)
        self.loop.release_all()
        self.engine.blocks.set_prefix_caching(self._prefix_cache_at_start)
        self._out.append({"type": "ended", "t_s": self.clock()})
        self._flush()

    def to_json(self) -> dict:
        s = self.summary
        return {
            "device": self.engine.device, "preset": self.engine.model_config.name,
            "settings": self.settings.to_json(), "duration_s": self.clock(),
            "students": len(s.students), "requests": s.sent,
            "background_requests": s.background, "finished": s.finished,
            "dropped": s.dropped, "output_tokens": s.output_tokens,
            "steps": self.loop.step_count,
            "ttft_ms": percentiles(s.ttft_ms), "itl_ms": percentiles(s.itl_ms),
            "knob_changes": list(self.knob_changes),
        }


def percentiles(values: list[float]) -> dict:
    """p50, p90, p99 and the count (None each when there are none)."""
    if not values:
        return {"p50": None, "p90": None, "p99": None, "count": 0}
    p50, p90, p99 = np.percentile(values, [50, 90, 99]).tolist()
    return {"p50": p50, "p90": p90, "p99": p99, "count": len(values)}
