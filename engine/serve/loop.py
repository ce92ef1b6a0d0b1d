"""The real-time serving loop: one step loop (EngineLoop) that admits requests between engine
steps under a batching policy and records the trace every metric and chart is computed from,
and `run`, which replays a known workload's arrivals through it on the wall clock.

The online server (serve/online.py) drives the same EngineLoop from requests that arrive over
HTTP, so an offline run and a served request go through one code path.

Time is time.perf_counter() minus the run's start, in seconds. Before each step the caller hands
the loop every request that has arrived by now (`add`); `step` asks the scheduler for a plan,
runs it, and records it. When there is nothing to run the caller sleeps until the next arrival
or the scheduler's wake-up time (the dynamic timeout). Each step's end time is read after
engine.step returned, which is after the device finished (the engine synchronizes), and every
token produced by that step carries that time. A finished sequence's slot and KV blocks are freed
in the step that finished it; `drop` takes a request out between steps (a client went away, or
its text reached a stop string), freeing its slot and blocks before the next step.

With a speculative decoder (engine.speculative; greedy requests only), a step whose plan is
decode rows only (no prefill, no padding) becomes a verify step: each running sequence's draft
proposes up to k tokens, the target checks them in one step, and every accepted token (1 to k + 1
a sequence) carries the step's end time. A step with prefill work, or one whose proposals the KV
pool could not hold, runs as a plain step; the text is the same either way.

Listeners get events while the run happens (`on_event`): a RequestEvent when a request arrives,
is admitted, is preempted, finishes or is dropped; a TokenEvent for each output token; a
StepEvent after each step. Listeners run inside the loop, between steps, so their time shows up
in the measured gaps: keep them cheap (put the event on a queue). `run` polls `cancelled()`
before every step and while sleeping; a cancelled run stops promptly and returns what it has,
marked cancelled. A call of `cancelled()` that takes a while is a pause (the lab's worker runs
other readers' short jobs inside it, engine.lab.worker): the run's clock stops for it, so
arrivals, waits and every time the run reports are as if the pause had not happened. A gap is
lent the same way: when the run has nothing to do until its next arrival or wake-up and
`cancelled` has a `fill(seconds)` attribute, the loop calls it instead of sleeping (the worker
runs another reader's short job in the idle time, engine.lab.worker) and it returns the seconds
it used; the clock stops only for what went past the gap, so the run goes on at its wake-up
time as if it had slept. The engine's KV blocks are always given back, however the run ends.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace

from ..errors import ConfigError
from ..llm_engine import LLMEngine
from ..scheduler import SchedulerConfig, kv_tokens_needed, make_scheduler
from ..sequence import Sequence
from ..speculative import SpeculativeDecoder
from ..tokenizer import IncrementalDecoder
from .metrics import Metrics, compute_metrics
from .phases import RequestPhases, run_phases
from .trace import Event, RequestEvent, RequestTrace, StepEvent, StepTrace, TokenEvent
from .workload import Request

POLL_S = 0.05  # longest sleep between two looks at the clock and the cancel flag
PAUSE_S = 0.001  # a cancelled() call this long or longer was a pause: the run's clock skips it
FILL_MIN_S = 0.02  # a gap this long or longer is offered to cancelled.fill (when it has one)


@dataclass
class RunResult:
    """Everything a run measured. to_json() gives the `run` command's JSON object."""

    device: str
    preset: str
    weights: str
    config: SchedulerConfig
    requests: list[RequestTrace]
    steps: list[StepTrace]
    metrics: Metrics
    cancelled: bool = False
    kv_blocks_total: int = 0
    block_size: int = 0
    extra: dict = field(default_factory=dict)  # e.g. the workload spec, added by the caller

    @property
    def policy(self) -> str:
        return self.config.policy

    def phases(self) -> dict[int, RequestPhases]:
        """Each finished request's time by phase (serve/phases.py)."""
        return run_phases(self.requests, self.steps)

    def to_json(self) -> dict:
        metrics = self.metrics.to_json()
        phases = self.phases()
        return {
            "device": self.device,
            "preset": self.preset,
            "weights": self.weights,
            "policy": self.policy,
            **self.extra,
            "config": self.config.to_json(),
            "cancelled": self.cancelled,
            "kv_blocks_total": self.kv_blocks_total,
            "block_size": self.block_size,
            "requests": [{**r.to_json(), "phases": phases[r.id].to_json() if r.id in phases
                          else None} for r in self.requests],
            "steps": [s.to_json() for s in self.steps],
            "metrics": metrics,
        }


def check_request(engine: LLMEngine, r: Request, config: SchedulerConfig,
                  label: str = "request {id}: ") -> None:
    """Refuse, naming the limit, a request the engine could never serve: an empty prompt, an
    output under one token, more than the context, more KV than the whole pool, or (unchunked,
    under an explicit token budget) a prompt larger than one step may hold. Each message starts
    with label (formatted with the request's id)."""
    who = label.format(id=r.id)
    if not r.prompt_ids:
        raise ConfigError(f"{who}the prompt is empty")
    if r.output_len < 1:
        raise ConfigError(f"{who}output length must be at least 1")
    if r.arrival_s is not None and not (r.arrival_s >= 0 and math.isfinite(r.arrival_s)):
        raise ConfigError(f"{who}arrival time must be 0 s or more")
    context = engine.model_config.context
    total = len(r.prompt_ids) + r.output_len
    if total > context:
        raise ConfigError(
            f"{who}prompt of {len(r.prompt_ids)} tokens plus {r.output_len} new "
            f"tokens exceeds the {engine.model_config.name} context of {context} positions")
    pool = engine.blocks.num_blocks  # the blocks sequences can get (less any set aside)
    block = engine.cache.block_size
    # Static batches prefill the prompt whole, then decode; continuous may recompute it all
    # after a preemption, in its chunks.
    whole = config.policy != "continuous"
    need = engine.blocks_per_sequence(kv_tokens_needed(len(r.prompt_ids), r.output_len),
                                      prefill=len(r.prompt_ids) if whole else None,
                                      chunk=0 if whole else config.chunk_size)
    if need > pool:
        raise ConfigError(
            f"{who}{len(r.prompt_ids)} + {r.output_len} tokens need {need} KV "
            f"blocks but the KV budget of {engine.cache.allocated_bytes / 2**20:.1f} MiB "
            f"holds only {pool} blocks of {block} tokens")
    budget = config.token_budget
    if (config.policy == "continuous" and config.chunk_size == 0 and budget is not None
            and kv_tokens_needed(len(r.prompt_ids), r.output_len) > budget):
        raise ConfigError(
            f"{who}with --chunk-size 0 a prompt prefills whole, and {total - 1} "
            f"tokens (its prompt plus output, recomputed after a preemption) exceed the "
            f"token budget of {budget} per step: raise it or use chunks")


def check_config(engine: LLMEngine, config: SchedulerConfig) -> None:
    """Refuse settings the engine cannot run, naming the limit."""
    config.validate()
    if config.max_batch > engine.config.max_batch:
        raise ConfigError(f"max batch {config.max_batch} exceeds the engine's limit of "
                          f"{engine.config.max_batch} sequences per step")


def check_requests(engine: LLMEngine, requests: list[Request], config: SchedulerConfig) -> None:
    """Refuse, naming the limit, settings or any request the engine could never serve."""
    check_config(engine, config)
    if not requests:
        raise ConfigError("no requests to serve: give at least one")
    ids = [r.id for r in requests]
    if len(set(ids)) != len(ids):
        raise ConfigError("request ids must be unique")
    for r in requests:
        check_request(engine, r, config)
    if all(r.arrival_s is None for r in requests):
        raise ConfigError("every request is closed-loop: at least one needs an arrival time")


@dataclass
class _Live:
    """A request between its arrival and its end: the engine's sequence and what it recorded."""

    seq: Sequence
    trace: RequestTrace
    decoder: IncrementalDecoder | None


class EngineLoop:
    """The step loop: requests in (`add`), one engine step at a time (`step`), requests out when
    they finish (in the step) or are dropped (between steps). It owns the scheduler and the
    trace; whoever drives it owns the clock's arrivals and the waiting between steps.

    keep_steps bounds the step history (None keeps every step, as a run needs; a server keeps
    the most recent ones)."""

    def __init__(self, engine: LLMEngine, config: SchedulerConfig,
                 clock: Callable[[], float], on_event: Callable[[Event], None] | None = None,
                 stream_text: bool = False, keep_steps: int | None = None,
                 speculative: SpeculativeDecoder | None = None):
        self.engine = engine
        self.speculative = speculative
        self.config = config
        self.scheduler = make_scheduler(engine, config)
        self.clock = clock
        self.emit = on_event or (lambda event: None)
        self.stream_text = stream_text
        self.live: dict[int, _Live] = {}
        self.steps: list[StepTrace] | deque[StepTrace] = (
            [] if keep_steps is None else deque(maxlen=keep_steps))
        self.step_count = 0

    @property
    def has_work(self) -> bool:
        return self.scheduler.has_work

    def next_wakeup(self) -> float | None:
        return self.scheduler.next_wakeup()

    def add(self, req: Request, arrival_s: float,
            trace: RequestTrace | None = None) -> RequestTrace:
        """A request arrives: it waits for the scheduler to admit it. Returns its trace (the
        given one, when the caller made it in advance)."""
        engine = self.engine
        if trace is None:
            trace = RequestTrace(req.id, arrival_s, len(req.prompt_ids), req.output_len)
        prompt_ids = req.prompt_ids
        if req.prompt_text is not None:  # the tokenize phase: its text, tokenized on arrival
            trace.tokenize_start_s = self.clock()
            prompt_ids = engine.tokenizer.encode(req.prompt_text)
            trace.tokenize_end_s = self.clock()
        seq = engine.new_sequence(prompt_ids, req.output_len, req.sampling,
                                  ignore_eos=not req.stop_at_eos, seq_id=req.id)
        trace.arrival_s = arrival_s
        decoder = IncrementalDecoder(engine.tokenizer) if self.stream_text else None
        self.emit(RequestEvent("arrived", req.id, arrival_s))
        refused = self.scheduler.add(seq, arrival_s, req.traffic_class, req.tenant)
        # the lane it runs in (an oversized prompt's is the background), else the one it named
        trace.traffic_class = self.scheduler.traffic_class(req.id) or req.traffic_class
        trace.tenant = req.tenant
        if refused is not None:  # its traffic class turned it away: it never runs
            trace.refused = refused
            self.emit(RequestEvent("refused", req.id, arrival_s))
            return trace
        self.live[req.id] = _Live(seq, trace, decoder)
        return trace

    def step(self, more_coming: bool) -> StepTrace | None:
        """Run the scheduler's next step and record it; None when nothing should run now.
        more_coming says whether any request may still arrive (static and dynamic batching
        wait for a full batch until none can)."""
        # One instant for the plan and the step's start: the traffic classes' buckets charge an
        # admission at the time the scheduler is given, and a trace's admitted_s is this same
        # time, so a quota read back from the traces holds exactly as the buckets kept it.
        step_start = self.clock()
        plan = self.scheduler.schedule(step_start, more_coming)
        if plan is None:
            return None
        emit = self.emit
        for seq in plan.preempted:
            self.live[seq.id].trace.preemptions += 1
            if self.speculative is not None:  # a draft model's copy goes too, made again later
                self.speculative.release(seq)
            emit(RequestEvent("preempted", seq.id, step_start))
        for seq in plan.admitted:
            trace = self.live[seq.id].trace
            if trace.admitted_s is None:
                trace.admitted_s = step_start
                trace.cached_tokens = seq.num_computed  # > 0 only after a prefix-cache hit
            emit(RequestEvent("admitted", seq.id, step_start))
        running = len(self.scheduler.running)
        tokens = self._run(plan)  # returns after the device finished
        end = self.clock()
        kv_used = self.engine.blocks.num_used

        finished: list[int] = []
        for seq_id, new in tokens.items():
            live = self.live[seq_id]
            trace = live.trace
            for token in new:
                trace.token_s.append(end)
                trace.output_ids.append(token)
                if trace.first_token_s is None:
                    trace.first_token_s = end
                text = None
                if live.decoder is not None:
                    pushed = time.perf_counter()
                    text = live.decoder.push(token)
                    trace.detokenize_s += time.perf_counter() - pushed
                emit(TokenEvent(seq_id, len(trace.token_s) - 1, token, end, text))
            if live.seq.finished:
                self._text_ready(live)
                if self.speculative is not None:
                    self.speculative.release(live.seq)
                trace.finish_s = end
                trace.output_len = len(trace.token_s)  # less if it stopped at end-of-text
                self.scheduler.finish(live.seq)
                del self.live[seq_id]
                finished.append(seq_id)
        for seq_id in finished:
            emit(RequestEvent("finished", seq_id, end))

        step = StepTrace(
            index=self.step_count, start_s=step_start, end_s=end,
            prefill_tokens=sum(n for _, n in plan.prefill), decode_seqs=len(plan.decode),
            kv_blocks_used=kv_used, running=running, padding_rows=plan.padding,
            decode_ids=[s.id for s in plan.decode],
            prefill_chunks=[(s.id, n) for s, n in plan.prefill],
            admitted_ids=[s.id for s in plan.admitted],
            preempted_ids=[s.id for s in plan.preempted],
            finished_ids=finished,
        )
        self.step_count += 1
        self.steps.append(step)
        emit(StepEvent(step))
        return step

    def _text_ready(self, live: _Live) -> None:
        """A finished request's text: streamed already, or its ids decoded now (timed, the
        detokenize phase); response_s is when it is ready."""
        trace = live.trace
        if live.decoder is None:
            started = time.perf_counter()
            self.engine.tokenizer.decode(trace.output_ids)
            trace.detokenize_s += time.perf_counter() - started
        trace.response_s = self.clock()

    def _run(self, plan) -> dict[int, list[int]]:
        """One engine step for the plan: {sequence id: its new tokens}. A verify step where the
        speculative decoder can take the plan (decode rows only, KV room for k more tokens each),
        else a plain step (after which the draft catches up with the tokens it did not see)."""
        spec = self.speculative
        if spec is not None and plan.decode and not plan.prefill and not plan.padding \
                and self._room_to_verify(plan.decode):
            return spec.step(plan.decode)
        tokens = self.engine.step(plan.decode, plan.prefill, plan.padding)
        if spec is not None and plan.decode:
            spec.draft.catch_up(plan.decode)
        return {seq_id: [token] for seq_id, token in tokens.items()}

    def _room_to_verify(self, seqs: list[Sequence]) -> bool:
        """Whether the KV pool holds every sequence's k proposals (capped, as the decoder caps
        them, at its last token) on top of its next token."""
        k, blocks = self.speculative.k, self.engine.blocks
        needed = sum(blocks.blocks_needed(s, 1 + max(0, min(k, s.max_new_tokens
                                                             - len(s.output_ids) - 1)))
                     for s in seqs)
        return needed <= blocks.num_free

    def drop(self, request_id: int, completed: bool) -> RequestTrace | None:
        """Take a request out between steps, wherever it is (waiting, prefilling, decoding):
        its slot and KV blocks are free for the next step. completed: it ended normally (its
        text reached a stop string), so its trace finishes at its last token; otherwise it was
        aborted (its client went away) and its trace stays unfinished, out of the metrics.
        Returns its trace, or None if it had already ended."""
        live = self.live.pop(request_id, None)
        if live is None:
            return None
        self.scheduler.abort(live.seq)
        if self.speculative is not None:
            self.speculative.release(live.seq)
        trace = live.trace
        if completed and trace.token_s:
            trace.finish_s = trace.token_s[-1]
            trace.output_len = len(trace.token_s)
            self._text_ready(live)
        self.emit(RequestEvent("finished" if completed else "aborted", request_id, self.clock()))
        return trace

    def release_all(self) -> None:
        """Give every block back (end of a run or of a server, normal or not)."""
        if self.speculative is not None:
            for live in self.live.values():
                self.speculative.release(live.seq)
        self.scheduler.release_all()
        self.live.clear()


def run(engine: LLMEngine, requests: Iterable[Request], config: SchedulerConfig,
        on_event: Callable[[Event], None] | None = None,
        cancelled: Callable[[], bool] | None = None,
        slo_ttft_ms: float | None = None, slo_tpot_ms: float | None = None,
        stream_text: bool = False, speculative: SpeculativeDecoder | None = None,
        ) -> RunResult:
    """Serve requests under config's policy in real time and return the trace and metrics.

    Requests with arrival_s None are closed-loop: each is released (arrives) when a request
    finishes, in list order. stream_text fills TokenEvent.text (decoding costs a little time
    between steps, so measurement runs leave it off). `speculative` verifies a draft's
    proposals in the steps that decode only (greedy requests only; the run's JSON then has a
    `speculative` object with the decoder's stats). Raises ConfigError, naming the limit, for
    a request that can never be served; nothing runs then.
    """
    requests = list(requests)
    check_requests(engine, requests, config)
    if speculative is not None and any(r.sampling is not None and not r.sampling.greedy
                                       for r in requests):
        raise ConfigError("speculative decoding here accepts greedily: every request's "
                          "temperature must be 0")
    engine.warm_up()
    traces = {r.id: RequestTrace(r.id, r.arrival_s, len(r.prompt_ids), r.output_len)
              for r in requests}
    timed = deque(sorted((r for r in requests if r.arrival_s is not None),
                         key=lambda r: (r.arrival_s, r.id)))
    closed = deque(r for r in requests if r.arrival_s is None)
    was_cancelled = False
    cache_before = replace(engine.blocks.stats)

    start = time.perf_counter()

    def clock() -> float:
        return time.perf_counter() - start

    loop = EngineLoop(engine, config, clock, on_event, stream_text, speculative=speculative)
    fill = getattr(cancelled, "fill", None)  # lends the run's idle gaps (engine.lab.worker)
    try:
        while True:
            if cancelled is not None:
                asked = time.perf_counter()
                stop = cancelled()
                paused = time.perf_counter() - asked
                if paused >= PAUSE_S:
                    start += paused  # clock() reads it: the pause is not the run's time
                if stop:
                    was_cancelled = True
                    break
            now = clock()
            while timed and timed[0].arrival_s <= now:
                req = timed.popleft()
                loop.add(req, req.arrival_s, traces[req.id])
            if not timed and not closed and not loop.has_work:
                break
            more_coming = bool(timed) or bool(closed and loop.scheduler.running)
            step = loop.step(more_coming)
            if step is None:
                wakeups = [t for t in (timed[0].arrival_s if timed else None,
                                       loop.next_wakeup()) if t is not None]
                if not wakeups:
                    raise RuntimeError("the scheduler has waiting requests but will never run "
                                       "them (a bug in the policy)")
                ahead = max(0.0, min(wakeups) - clock())
                if fill is not None and ahead >= FILL_MIN_S:
                    used = fill(ahead)
                    if used:  # other work ran in the gap: only what went past it is a pause
                        start += max(0.0, used - ahead)
                        continue
                time.sleep(min(ahead, POLL_S))
                continue
            for _ in step.finished_ids:  # closed loop: a finished request lets the next one in
                if closed:
                    req = closed.popleft()
                    loop.add(req, step.end_s, traces[req.id])
    finally:
        loop.release_all()

    ordered = [traces[r.id] for r in requests]
    extra = {}
    if engine.blocks.prefix_caching:  # only then: runs without it keep their JSON as it was
        extra["prefix_cache"] = {
            **engine.blocks.stats.since(cache_before).to_json(),
            "cached_tokens": [traces[r.id].cached_tokens for r in requests],
            "cached_blocks_at_end": engine.blocks.num_cached,
        }
    if speculative is not None:  # only then, as for the prefix cache
        extra["speculative"] = speculative.stats.to_json()
    return RunResult(
        device=engine.device,
        preset=engine.model_config.name,
        weights="random" if engine.config.random_weights else engine.model_config.weights,
        config=config,
        requests=ordered,
        steps=list(loop.steps),
        metrics=compute_metrics(ordered, loop.steps, config.max_batch, slo_ttft_ms, slo_tpot_ms),
        cancelled=was_cancelled,
        kv_blocks_total=engine.blocks.num_blocks,
        block_size=engine.cache.block_size,
        extra=extra,
    )
