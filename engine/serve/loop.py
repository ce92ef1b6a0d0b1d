"""The real-time serving loop: replays arrivals on the wall clock, steps the engine under a
batching policy, and records the trace every metric and chart is computed from.

Time is time.perf_counter() minus the run's start, in seconds. Before each step the loop hands
the scheduler every request whose arrival time has passed; when there is nothing to run it sleeps
until the next arrival or the scheduler's wake-up time (the dynamic timeout). Each step's end
time is read after engine.step returned, which is after the device finished (the engine
synchronizes), and every token produced by that step carries that time.

Listeners get events while the run happens (`on_event`): a RequestEvent when a request arrives,
is admitted, is preempted, or finishes; a TokenEvent for each output token; a StepEvent after
each step. Listeners run inside the loop, between steps, so their time shows up in the
measured gaps: keep them cheap (put the event on a queue). `cancelled()` is polled before every
step and while sleeping; a cancelled run stops promptly and returns what it has, marked
cancelled. The engine's KV blocks are always given
back, however the run ends.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace

from ..block_manager import blocks_for
from ..errors import ConfigError
from ..llm_engine import LLMEngine
from ..scheduler import SchedulerConfig, kv_tokens_needed, make_scheduler
from ..sequence import Sequence
from ..tokenizer import IncrementalDecoder
from .metrics import Metrics, compute_metrics
from .trace import Event, RequestEvent, RequestTrace, StepEvent, StepTrace, TokenEvent
from .workload import Request

POLL_S = 0.05  # longest sleep between two looks at the clock and the cancel flag


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

    def to_json(self) -> dict:
        metrics = self.metrics.to_json()
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
            "requests": [r.to_json() for r in self.requests],
            "steps": [s.to_json() for s in self.steps],
            "metrics": metrics,
        }


def check_requests(engine: LLMEngine, requests: list[Request], config: SchedulerConfig) -> None:
    """Refuse, naming the limit, any request the engine could never serve: an empty prompt, an
    output under one token, more than the context, more KV than the whole pool, or (unchunked,
    under an explicit token budget) a prompt larger than one step may hold."""
    config.validate()
    if not requests:
        raise ConfigError("no requests to serve: give at least one")
    if config.max_batch > engine.config.max_batch:
        raise ConfigError(f"max batch {config.max_batch} exceeds the engine's limit of "
                          f"{engine.config.max_batch} sequences per step")
    ids = [r.id for r in requests]
    if len(set(ids)) != len(ids):
        raise ConfigError("request ids must be unique")
    context = engine.model_config.context
    pool = engine.blocks.num_blocks  # the blocks sequences can get (less any set aside)
    block = engine.cache.block_size
    budget = config.token_budget
    for r in requests:
        if not r.prompt_ids:
            raise ConfigError(f"request {r.id}: the prompt is empty")
        if r.output_len < 1:
            raise ConfigError(f"request {r.id}: output length must be at least 1")
        if r.arrival_s is not None and not (r.arrival_s >= 0 and math.isfinite(r.arrival_s)):
            raise ConfigError(f"request {r.id}: arrival time must be 0 s or more")
        total = len(r.prompt_ids) + r.output_len
        if total > context:
            raise ConfigError(
                f"request {r.id}: prompt of {len(r.prompt_ids)} tokens plus {r.output_len} new "
                f"tokens exceeds the {engine.model_config.name} context of {context} positions")
        need = blocks_for(kv_tokens_needed(len(r.prompt_ids), r.output_len), block)
        if need > pool:
            raise ConfigError(
                f"request {r.id}: {len(r.prompt_ids)} + {r.output_len} tokens need {need} KV "
                f"blocks but the KV budget of {engine.cache.allocated_bytes / 2**20:.1f} MiB "
                f"holds only {pool} blocks of {block} tokens")
        if (config.policy == "continuous" and config.chunk_size == 0 and budget is not None
                and kv_tokens_needed(len(r.prompt_ids), r.output_len) > budget):
            raise ConfigError(
                f"request {r.id}: with --chunk-size 0 a prompt prefills whole, and {total - 1} "
                f"tokens (its prompt plus output, recomputed after a preemption) exceed the "
                f"token budget of {budget} per step: raise it or use chunks")
    if all(r.arrival_s is None for r in requests):
        raise ConfigError("every request is closed-loop: at least one needs an arrival time")


def run(engine: LLMEngine, requests: Iterable[Request], config: SchedulerConfig,
        on_event: Callable[[Event], None] | None = None,
        cancelled: Callable[[], bool] | None = None,
        slo_ttft_ms: float | None = None, slo_tpot_ms: float | None = None,
        stream_text: bool = False) -> RunResult:
    """Serve requests under config's policy in real time and return the trace and metrics.

    Requests with arrival_s None are closed-loop: each is released (arrives) when a request
    finishes, in list order. stream_text fills TokenEvent.text (decoding costs a little time
    between steps, so measurement runs leave it off). Raises ConfigError, naming the limit, for
    a request that can never be served; nothing runs then.
    """
    requests = list(requests)
    check_requests(engine, requests, config)
    engine.warm_up()
    emit = on_event or (lambda event: None)
    scheduler = make_scheduler(engine, config)
    traces = {r.id: RequestTrace(r.id, r.arrival_s, len(r.prompt_ids), r.output_len)
              for r in requests}
    timed = deque(sorted((r for r in requests if r.arrival_s is not None),
                         key=lambda r: (r.arrival_s, r.id)))
    closed = deque(r for r in requests if r.arrival_s is None)
    seqs: dict[int, Sequence] = {}
    decoders: dict[int, IncrementalDecoder] = {}
    steps: list[StepTrace] = []
    was_cancelled = False
    cache_before = replace(engine.blocks.stats)
    cached_tokens: dict[int, int] = {}  # prompt tokens each request found in the prefix cache

    def arrive(req: Request, t: float) -> None:
        seq = engine.new_sequence(req.prompt_ids, req.output_len, req.sampling,
                                  ignore_eos=not req.stop_at_eos, seq_id=req.id)
        seqs[req.id] = seq
        traces[req.id].arrival_s = t
        if stream_text:
            decoders[req.id] = IncrementalDecoder(engine.tokenizer)
        scheduler.add(seq, t)
        emit(RequestEvent("arrived", req.id, t))

    start = time.perf_counter()

    def clock() -> float:
        return time.perf_counter() - start

    try:
        while True:
            if cancelled is not None and cancelled():
                was_cancelled = True
                break
            now = clock()
            while timed and timed[0].arrival_s <= now:
                req = timed.popleft()
                arrive(req, req.arrival_s)
            if not timed and not closed and not scheduler.has_work:
                break
            more_coming = bool(timed) or bool(closed and scheduler.running)
            plan = scheduler.schedule(now, more_coming)
            if plan is None:
                wakeups = [t for t in (timed[0].arrival_s if timed else None,
                                       scheduler.next_wakeup()) if t is not None]
                if not wakeups:
                    raise RuntimeError("the scheduler has waiting requests but will never run "
                                       "them (a bug in the policy)")
                time.sleep(min(max(0.0, min(wakeups) - clock()), POLL_S))
                continue

            step_start = clock()
            for seq in plan.preempted:
                traces[seq.id].preemptions += 1
                emit(RequestEvent("preempted", seq.id, step_start))
            for seq in plan.admitted:
                if traces[seq.id].admitted_s is None:
                    traces[seq.id].admitted_s = step_start
                    cached_tokens[seq.id] = seq.num_computed  # > 0 only after a cache hit
                emit(RequestEvent("admitted", seq.id, step_start))
            running = len(scheduler.running)
            # returns after the device finished
            tokens = engine.step(plan.decode, plan.prefill, plan.padding)
            end = clock()
            kv_used = engine.blocks.num_used

            finished: list[int] = []
            for seq_id, token in tokens.items():
                trace = traces[seq_id]
                trace.token_s.append(end)
                trace.output_ids.append(token)
                if trace.first_token_s is None:
                    trace.first_token_s = end
                text = decoders[seq_id].push(token) if stream_text else None
                emit(TokenEvent(seq_id, len(trace.token_s) - 1, token, end, text))
                seq = seqs[seq_id]
                if seq.finished:
                    trace.finish_s = end
                    trace.output_len = len(trace.token_s)  # less if it stopped at end-of-text
                    scheduler.finish(seq)
                    finished.append(seq_id)
            for seq_id in finished:
                emit(RequestEvent("finished", seq_id, end))
                if closed:  # closed loop: a finished request lets the next one in
                    arrive(closed.popleft(), end)

            step = StepTrace(
                index=len(steps), start_s=step_start, end_s=end,
                prefill_tokens=sum(n for _, n in plan.prefill), decode_seqs=len(plan.decode),
                kv_blocks_used=kv_used, running=running, padding_rows=plan.padding,
                decode_ids=[s.id for s in plan.decode],
                prefill_chunks=[(s.id, n) for s, n in plan.prefill],
                admitted_ids=[s.id for s in plan.admitted],
                preempted_ids=[s.id for s in plan.preempted],
                finished_ids=finished,
            )
            steps.append(step)
            emit(StepEvent(step))
    finally:
        scheduler.release_all()

    ordered = [traces[r.id] for r in requests]
    extra = {}
    if engine.blocks.prefix_caching:  # only then: runs without it keep their JSON as it was
        extra["prefix_cache"] = {
            **engine.blocks.stats.since(cache_before).to_json(),
            "cached_tokens": [cached_tokens.get(r.id, 0) for r in requests],
            "cached_blocks_at_end": engine.blocks.num_cached,
        }
    return RunResult(
        device=engine.device,
        preset=engine.model_config.name,
        weights="random" if engine.config.random_weights else engine.model_config.weights,
        config=config,
        requests=ordered,
        steps=steps,
        metrics=compute_metrics(ordered, steps, config.max_batch, slo_ttft_ms, slo_tpot_ms),
        cancelled=was_cancelled,
        kv_blocks_total=engine.blocks.num_blocks,
        block_size=engine.cache.block_size,
        extra=extra,
    )
