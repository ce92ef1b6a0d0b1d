"""The engine serving requests as they come: the step loop (loop.EngineLoop) in a thread of its
own that owns the engine, fed by any number of clients from other threads.

A client hands in a Submission (`submit`) and gets its output, step by step, through the
Submission's `deliver` callback, called on the engine thread (the HTTP server passes a callback
that puts the output on its event loop's queue). Between two steps the engine thread takes in
every new request and every abort from one thread-safe inbox, so new requests join the running
batch at the next step (continuous batching) and an aborted request's slot and KV blocks are
free before the next step. A request whose text reaches one of its stop strings is finished the
same way, right after the step that produced it.

Times are seconds on one clock, time.perf_counter() minus the server's start, as in a run. A
request's arrival is the moment its client handed it in (after the HTTP server parsed and
tokenized it), so the server's TTFT is first token minus that moment. The HTTP side's own times
(the request reaching the server, its tokenizer run, its response's end: `responded`) go into
its trace, so `trace` gives each request's phases (engine.serve.phases).

With traffic classes (SchedulerConfig.traffic, engine/traffic.py) a Submission names its class
and its tenant; the engine thread classifies it as it takes it in, and tells the client at once
through `accepted`: None (it waits in its lane) or the Refusal (it never runs, and ends with
finish reason "refused"), so an HTTP server can answer 400 or 429 before it sends anything.

The recent history (ended requests and steps) is kept, bounded, for `stats` and `trace`: what a
client needs to check that requests were batched and blocks freed, and to compare its own
measurements with the engine's (bench_client.py).
"""

from __future__ import annotations

import itertools
import queue
import sys
import threading
import time
import traceback
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field

from ..llm_engine import LLMEngine
from ..sampler import SamplingParams
from ..scheduler import SchedulerConfig
from ..traffic import Refusal, RefusalKind
from .loop import POLL_S, EngineLoop, check_config, check_request
from .metrics import compute_metrics
from .phases import run_phases
from .prometheus import ServerMetrics
from .trace import Event, RequestEvent, RequestTrace, StepTrace, TokenEvent
from .workload import Request

HISTORY_REQUESTS = 4096  # ended requests kept for `trace`
HISTORY_STEPS = 20000  # steps kept for `trace`
RECENT_STEPS = 32  # steps `stats` shows


@dataclass
class Output:
    """What one step produced for one request, as its client receives it.

    token_ids are this step's new tokens (one per step); text is the new text that can be
    shown (text that might be the start of a stop string is held back until it is not);
    completion_tokens counts every output token so far. finish_reason is set on a request's
    last output: "stop" (end-of-text or a stop string), "length" (max tokens), "abort" (its
    client went away, or the server closed), "refused" (its traffic class turned it away, the
    reason in error) or "error" (with a message in error).
    """

    token_ids: list[int]
    text: str
    t_s: float
    prompt_tokens: int
    completion_tokens: int
    finish_reason: str | None = None
    error: str | None = None

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None


@dataclass
class Submission:
    """One request as a client hands it in. deliver is called on the engine thread with each
    Output, so it must be cheap and thread-safe (e.g. an event loop's call_soon_threadsafe)."""

    prompt_ids: list[int]
    max_tokens: int
    sampling: SamplingParams
    deliver: Callable[[Output], None]
    stop: list[str] = field(default_factory=list)
    ignore_eos: bool = False
    name: str = ""  # the client's id for it (the API's response id), kept in the trace
    # The HTTP side's times on the server's clock (engine.serve.phases): when the request
    # reached the server, and the tokenizer's run on its text before it was handed in.
    received_s: float | None = None
    tokenize_start_s: float | None = None
    tokenize_end_s: float | None = None
    # Traffic classes: its lane (None: the first class) and whose quota it draws on; accepted
    # is called on the engine thread once it is classified (None: it waits; else the Refusal).
    traffic_class: str | None = None
    tenant: str | None = None
    accepted: Callable[[Refusal | None], None] | None = None


@dataclass
class _Active:
    """A request on the engine thread: its submission, its trace, its text so far."""

    sub: Submission
    trace: RequestTrace | None = None
    text: str = ""  # all text so far (cut before a stop string once one matched)
    sent: int = 0  # characters of text already delivered
    new_tokens: list[int] = field(default_factory=list)  # this step's
    finish_reason: str | None = None


def stop_at(text: str, stops: list[str], start: int) -> int | None:
    """Where text must be cut: the first occurrence of any stop string at or after start (text
    before start was delivered, so no stop string begins there), or None."""
    found = [i for i in (text.find(s, start) for s in stops) if i >= 0]
    return min(found) if found else None


def safe_end(text: str, stops: list[str]) -> int:
    """How much of text can be shown: all of it but a tail that could still become a stop
    string (the longest suffix that is a proper prefix of one)."""
    longest = max((len(s) for s in stops), default=0)
    for k in range(min(len(text), longest - 1), 0, -1):
        if any(s.startswith(text[-k:]) for s in stops):
            return len(text) - k
    return len(text)


class OnlineEngine:
    """An engine loop in its own thread, serving requests handed in from other threads."""

    def __init__(self, engine: LLMEngine, config: SchedulerConfig, model_name: str = ""):
        check_config(engine, config)
        self.engine = engine
        self.config = config
        self.metrics = ServerMetrics(model_name or engine.model_config.name,
                                     engine.model_config.context)
        self._start = time.perf_counter()
        self._inbox: queue.SimpleQueue = queue.SimpleQueue()
        self._ids = itertools.count()
        self._active: dict[int, _Active] = {}
        self._touched: list[int] = []  # requests that got a token in the step running now
        self._lock = threading.Lock()  # guards the history and the counts
        self._ended: deque[tuple[str, str, RequestTrace]] = deque(maxlen=HISTORY_REQUESTS)
        self._traces: OrderedDict[int, RequestTrace] = OrderedDict()  # by id, for responded
        self._steps: deque[StepTrace] = deque(maxlen=HISTORY_STEPS)
        self._counts = {"stop": 0, "length": 0, "abort": 0, "error": 0, "refused": 0}
        self._closing = threading.Event()
        self.loop = EngineLoop(engine, config, self.clock, self._on_event, stream_text=True,
                               keep_steps=0)
        self._thread = threading.Thread(target=self._run, name="engine-loop", daemon=True)
        self.error: str | None = None

    # ---- any thread --------------------------------------------------------------------------
    def clock(self) -> float:
        return time.perf_counter() - self._start

    @property
    def weights(self) -> str:
        return "random" if self.engine.config.random_weights else self.engine.model_config.weights

    def start(self) -> None:
        self.engine.warm_up()
        self._thread.start()

    def close(self, timeout_s: float = 10.0) -> None:
        """Stop the engine thread; requests still running end with finish reason "abort"."""
        self._closing.set()
        self._inbox.put(("wake", -1, None, 0.0))
        if self._thread.is_alive():
            self._thread.join(timeout_s)

    def check(self, prompt_ids: list[int], max_tokens: int) -> None:
        """Raise ConfigError, naming the limit, for a request this engine could never serve."""
        check_request(self.engine, Request(-1, prompt_ids, max_tokens), self.config, label="")

    def submit(self, sub: Submission) -> int:
        """Hand a request in (check it first); returns its engine id, for `abort`."""
        if self.error is not None or self._closing.is_set():
            raise RuntimeError(f"the engine is not running ({self.error or 'closing'})")
        request_id = next(self._ids)
        self._inbox.put(("add", request_id, sub, self.clock()))
        return request_id

    def responded(self, request_id: int) -> None:
        """The HTTP server handed the request's last byte back now (its response's end)."""
        with self._lock:
            trace = self._traces.get(request_id)
        if trace is not None:
            trace.response_end_s = self.clock()

    def abort(self, request_id: int) -> None:
        """The client went away: free the request's slot and blocks before the next step."""
        self._inbox.put(("abort", request_id, None, 0.0))

    def stats(self) -> dict:
        """The engine's state now: load, KV blocks, counts, and the most recent steps."""
        scheduler = self.loop.scheduler
        with self._lock:
            recent = list(itertools.islice(reversed(self._steps), RECENT_STEPS))[::-1]
            counts = dict(self._counts)
        return {
            "now_s": self.clock(),
            "device": self.engine.device,
            "model": self.engine.model_config.name,
            "weights": self.weights,
            "policy": self.config.policy,
            "max_batch": self.config.max_batch,
            "running": len(scheduler.running),
            "waiting": len(scheduler.waiting),
            "kv_blocks_used": self.engine.blocks.num_used,
            "kv_blocks_total": self.engine.blocks.num_blocks,
            "block_size": self.engine.cache.block_size,
            "requests_finished": counts["stop"] + counts["length"],
            "requests_aborted": counts["abort"],
            "requests_refused": counts["refused"],
            "requests_failed": counts["error"],
            "steps_total": self.loop.step_count,
            "recent_steps": [s.to_json() for s in recent],
            "error": self.error,
            **({"traffic": self._lanes()} if scheduler.traffic is not None else {}),
        }

    def _lanes(self) -> dict:
        """Per traffic class: requests running and waiting now (read from another thread:
        a snapshot, each count exact at some moment between two steps)."""
        scheduler = self.loop.scheduler
        lanes = {name: {"running": 0, "waiting": 0} for name in self.config.traffic.names}
        for key, seqs in (("running", list(scheduler.running)),
                          ("waiting", list(scheduler.waiting))):
            for seq in seqs:
                tag = scheduler.traffic.tags.get(seq.id)  # .get: it may end meanwhile
                if tag is not None and tag.traffic_class in lanes:
                    lanes[tag.traffic_class][key] += 1
        return lanes

    def prometheus(self) -> bytes:
        """The Prometheus text format (prometheus.py), its gauges read from the engine now."""
        scheduler = self.loop.scheduler
        return self.metrics.exposition(len(scheduler.running), len(scheduler.waiting),
                                       self.engine.blocks.num_used, self.engine.blocks.num_blocks)

    def trace(self, since_s: float = 0.0) -> dict:
        """The engine's own record of what arrived and ran since since_s (server clock), in the
        `run` command's shape: ended requests (each with the client's id for it, `name`, and
        its finish reason), steps, and the metrics of the finished ones, computed as a run
        computes them."""
        with self._lock:
            ended = [e for e in self._ended if e[2].arrival_s >= since_s]
            steps = [s for s in self._steps if s.start_s >= since_s]
        finished = [trace for _, _, trace in ended if trace.finished]
        phases = run_phases(finished, steps)
        return {
            "device": self.engine.device,
            "preset": self.engine.model_config.name,
            "weights": self.weights,
            "policy": self.config.policy,
            "config": self.config.to_json(),
            "now_s": self.clock(),
            "since_s": since_s,
            "kv_blocks_total": self.engine.blocks.num_blocks,
            "block_size": self.engine.cache.block_size,
            "requests": [{**trace.to_json(), "name": name, "finish_reason": reason,
                          "phases": phases[trace.id].to_json() if trace.id in phases else None}
                         for name, reason, trace in ended],
            "steps": [s.to_json() for s in steps],
            "metrics": compute_metrics(finished, steps, self.config.max_batch).to_json(),
        }

    # ---- the engine thread -------------------------------------------------------------------
    def _run(self) -> None:
        try:
            while not self._closing.is_set():
                self._take_inbox(block=not self.loop.has_work)
                if self._closing.is_set():
                    break
                step = self.loop.step(more_coming=True)
                if step is None:
                    if self.loop.has_work:  # waiting for blocks or a timeout: do not spin
                        self._take_inbox(block=True)
                    continue
                self._after_step(step)
        except Exception as e:  # a bug: end every request with an error rather than hang them
            self.error = f"{type(e).__name__}: {e}"
            traceback.print_exc(file=sys.stderr)
        finally:
            for request_id in list(self._active):
                self._end(request_id, "error" if self.error else "abort", error=self.error)
            self.loop.release_all()

    def _take_inbox(self, block: bool) -> None:
        """Take in every new request and apply every abort waiting in the inbox; when block is
        set, first wait for a message (at most POLL_S, so closing is noticed)."""
        try:
            msg = self._inbox.get(timeout=POLL_S) if block else self._inbox.get_nowait()
        except queue.Empty:
            return
        while True:
            kind, request_id, sub, t = msg
            if kind == "add":
                self._add(request_id, sub, t)
            elif kind == "abort" and request_id in self._active:
                self._end(request_id, "abort")
            try:
                msg = self._inbox.get_nowait()
            except queue.Empty:
                return

    def _add(self, request_id: int, sub: Submission, arrival_s: float) -> None:
        active = self._active[request_id] = _Active(sub)
        req = Request(request_id, sub.prompt_ids, sub.max_tokens, arrival_s,
                      stop_at_eos=not sub.ignore_eos, sampling=sub.sampling,
                      traffic_class=sub.traffic_class, tenant=sub.tenant)
        try:
            active.trace = self.loop.add(req, arrival_s)
        except Exception as e:  # checked before submit, so only a bug lands here
            active.trace = RequestTrace(request_id, arrival_s, len(sub.prompt_ids),
                                        sub.max_tokens)
            self._end(request_id, "error", error=str(e))
        trace = active.trace
        trace.received_s = sub.received_s
        trace.tokenize_start_s, trace.tokenize_end_s = sub.tokenize_start_s, sub.tokenize_end_s
        with self._lock:
            self._traces[request_id] = trace
            while len(self._traces) > HISTORY_REQUESTS:
                self._traces.popitem(last=False)
        refusal = trace.refused
        if refusal is not None and not isinstance(refusal, Refusal):
            refusal = Refusal(refusal, RefusalKind.CAP)
        if sub.accepted is not None:
            try:
                sub.accepted(refusal)
            except RuntimeError:  # the client's event loop closed
                pass
        if refusal is not None and request_id in self._active:
            self._end(request_id, "refused", error=str(refusal))

    def _on_event(self, event: Event) -> None:
        """Inside a step (keep it cheap): collect each request's new tokens and text."""
        if isinstance(event, TokenEvent):
            active = self._active[event.request_id]
            active.new_tokens.append(event.token_id)
            active.text += event.text or ""
            self._touched.append(event.request_id)
        elif isinstance(event, RequestEvent) and event.kind == "finished":
            active = self._active.get(event.request_id)
            if active is not None and active.finish_reason is None:
                eos = (not active.sub.ignore_eos and active.trace.output_ids
                       and active.trace.output_ids[-1] == self.engine.tokenizer.eos_id)
                active.finish_reason = "stop" if eos else "length"

    def _after_step(self, step: StepTrace) -> None:
        """Deliver each request's output of this step. Requests that ended in it are already
        out of the batch; a request whose text reached a stop string is taken out now, so its
        slot and blocks are free for the next step."""
        touched, self._touched = self._touched, []
        # Recorded before any client hears of the step: a trace asked for once a client has its
        # tokens holds the step that made them.
        with self._lock:
            self._steps.append(step)
        for request_id in dict.fromkeys(touched):
            active = self._active[request_id]
            self.metrics.on_tokens(active.trace, len(active.new_tokens))
        self.metrics.on_step(step)
        for request_id in touched:
            active = self._active[request_id]
            stops = active.sub.stop
            cut = stop_at(active.text, stops, active.sent) if stops else None
            if cut is not None:
                active.text = active.text[:cut]
                if active.finish_reason is None:  # still in the batch: out before the next step
                    self.loop.drop(request_id, completed=True)
                active.finish_reason = "stop"
            if active.finish_reason is not None:
                self._end(request_id, active.finish_reason)
            else:
                self._deliver(active, safe_end(active.text, stops) if stops else len(active.text))

    def _deliver(self, active: _Active, upto: int, finish_reason: str | None = None,
                 error: str | None = None) -> None:
        trace = active.trace
        t_s = trace.token_s[-1] if trace.token_s else self.clock()
        out = Output(active.new_tokens, active.text[active.sent:upto], t_s,
                     len(active.sub.prompt_ids), len(trace.output_ids), finish_reason, error)
        active.sent = max(active.sent, upto)
        active.new_tokens = []
        try:
            active.sub.deliver(out)
        except RuntimeError:  # the client's event loop closed: nobody to deliver to
            pass

    def _end(self, request_id: int, reason: str, error: str | None = None) -> None:
        """A request's last output. One that did not finish in a step (aborted, failed) is
        taken out of the batch first; its trace goes into the history either way."""
        active = self._active.pop(request_id)
        if reason in ("abort", "error"):
            self.loop.drop(request_id, completed=False)
        # In the history before the client has its last output: a client that then asks for
        # the trace finds its request there (bench-client does, at once).
        with self._lock:
            self._ended.append((active.sub.name, reason, active.trace))
            self._counts[reason] += 1
        self.metrics.on_end(active.trace, reason)
        self._deliver(active, len(active.text), reason, error)
