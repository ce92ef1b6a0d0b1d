"""Batching policies: which sequences run in the next engine step.

Three policies share one interface. The serving loop (serve/loop.py) owns the clock and the
arrivals: it hands each arrived request to `add`, asks `schedule(now, more_coming)` for a
StepPlan before every step (None: nothing to run now), runs the plan on the engine, and calls
`finish` for every sequence that ended. When idle it sleeps until the next arrival or
`next_wakeup()` (the dynamic policy's timeout). The scheduler decides; the engine runs.

- static: a batch launches when --max-batch requests wait, or when no more will arrive; its
  prompts prefill (whole) in one step, then the members decode together until every member has
  finished. The batch is one fixed-size tensor, as in request-level engines (Hugging Face
  generate() on a batch, FasterTransformer): a finished member's row is still computed, as a
  padding row whose output is thrown away, and nothing is admitted until the batch ends. So a
  finished member's slot is not just empty but wasted work.
- dynamic: the same batches, launched when full or when the oldest waiting request has waited
  --timeout-ms.
- continuous: at every step, under --max-batch running sequences and a per-step token budget:
  every running sequence in decode gets its one token first, then sequences part-way through
  their prompt get their next chunk, then waiting requests are admitted into free slots with
  their first chunk. Chunks are at most --chunk-size tokens; --chunk-size 0 prefills a whole
  prompt in one step (the stall lesson 7 shows).

With traffic classes (SchedulerConfig.traffic, continuous only), each arriving request is
classified into a lane (engine/traffic.py: it may be refused there, with a reason) and admission
takes the waiting request the class policy picks instead of the oldest; without them the queue
is one first-come-first-served line, as above.

With prefix caching on (EngineConfig.prefix_caching), a request admitted from the queue first
takes the cached blocks its prompt starts with, and its first chunk starts after them.

KV memory: static and dynamic batches launch only with the members whose whole length (prompt
plus output) fits in the free blocks, as static batching reserves its worst case; they never
preempt. Continuous grows sequences a block at a time, and when the pool runs dry the newest
running request is preempted by recompute: it gives its blocks back and waits again at the front
of the queue, keeping its output so far, which it recomputes (as a prefill) when readmitted.
"""

from __future__ import annotations

from collections import deque
from dataclasses import asdict, dataclass, field

from .config import POLICIES
from .errors import ConfigError
from .llm_engine import LLMEngine
from .sequence import Sequence
from .traffic import TrafficPolicy, TrafficState

DEFAULT_TOKEN_BUDGET = 512
DEFAULT_CHUNK_SIZE = 256


@dataclass
class SchedulerConfig:
    """A policy and its knobs. timeout_ms is used by dynamic only; chunk_size and the token budget
    by continuous only (static and dynamic prefill a batch's whole prompts in one step)."""

    policy: str = "continuous"
    max_batch: int = 8
    timeout_ms: float = 50.0
    chunk_size: int = DEFAULT_CHUNK_SIZE  # 0: prefill each prompt whole, in one step
    max_tokens_per_step: int | None = None  # None: 512 (or more), no limit with chunk_size 0
    traffic: TrafficPolicy | None = None  # None: one FIFO queue (engine/traffic.py)

    @property
    def token_budget(self) -> int | None:
        """Most tokens one continuous step may process. By default 512 (raised to the chunk size
        or max_batch if larger); with chunk_size 0 no limit unless one is given, so that any
        prompt can prefill whole."""
        if self.max_tokens_per_step is not None:
            return self.max_tokens_per_step
        if self.chunk_size == 0:
            return None
        return max(DEFAULT_TOKEN_BUDGET, self.chunk_size, self.max_batch)

    def validate(self) -> None:
        if self.policy not in POLICIES:
            raise ConfigError(f"unknown policy {self.policy!r}: choose one of {', '.join(POLICIES)}")
        if self.max_batch < 1:
            raise ConfigError(f"max batch must be at least 1 (got {self.max_batch})")
        if not self.timeout_ms >= 0:
            raise ConfigError(f"timeout must be 0 ms or more (got {self.timeout_ms})")
        if self.chunk_size < 0:
            raise ConfigError(f"chunk size must be 0 (whole prompts) or more (got {self.chunk_size})")
        budget = self.max_tokens_per_step
        if budget is not None:
            if budget < max(1, self.chunk_size):
                raise ConfigError(f"max tokens per step ({budget}) must be at least the chunk "
                                  f"size ({self.chunk_size})")
            if budget < self.max_batch:
                raise ConfigError(f"max tokens per step ({budget}) must be at least max batch "
                                  f"({self.max_batch}), so every running sequence can decode")
        if self.traffic is not None:
            if self.policy != "continuous":
                raise ConfigError("traffic classes need the continuous policy")
            self.traffic.validate()

    def to_json(self) -> dict:
        out = {**asdict(self), "token_budget": self.token_budget}
        if self.traffic is None:  # runs without classes keep their JSON as it was
            del out["traffic"]
        else:
            out["traffic"] = self.traffic.to_json()
        return out


@dataclass
class StepPlan:
    """One step's work: decode sequences run one token each, prefill chunks (seq, n) run n
    tokens each; plus who entered the running batch now and who was preempted to make room."""

    decode: list[Sequence] = field(default_factory=list)
    prefill: list[tuple[Sequence, int]] = field(default_factory=list)
    admitted: list[Sequence] = field(default_factory=list)
    preempted: list[Sequence] = field(default_factory=list)
    padding: int = 0  # rows computed and thrown away: a fixed-size batch's finished members

    @property
    def num_tokens(self) -> int:
        return len(self.decode) + sum(n for _, n in self.prefill)

    @property
    def empty(self) -> bool:
        return not self.decode and not self.prefill


def kv_tokens_needed(prompt_len: int, output_len: int) -> int:
    """Positions a request's cache must hold at its largest: the last output token is sampled
    but never fed back, so it takes no slot."""
    return prompt_len + output_len - 1


class Scheduler:
    """Waiting queue (arrived, not running) and running list (in admission order)."""

    def __init__(self, engine: LLMEngine, config: SchedulerConfig):
        self.engine = engine
        self.config = config
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self.arrival_s: dict[int, float] = {}
        self.traffic = TrafficState(config.traffic) if config.traffic is not None else None

    def add(self, seq: Sequence, arrival_s: float, traffic_class: str | None = None,
            tenant: str | None = None) -> str | None:
        """A request arrives and waits. With traffic classes it may be refused instead: the
        one-line reason is returned (None: it waits)."""
        if self.traffic is not None:
            tag = self.traffic.arrive(seq.id, traffic_class, tenant, len(seq.prompt_ids),
                                      seq.max_new_tokens, [s.id for s in self.waiting],
                                      arrival_s)
            if isinstance(tag, str):
                return tag
        self.arrival_s[seq.id] = arrival_s
        self.waiting.append(seq)
        return None

    def traffic_class(self, seq_id: int) -> str | None:
        """The lane a request runs in (None without traffic classes)."""
        if self.traffic is None or seq_id not in self.traffic.tags:
            return None
        return self.traffic.tags[seq_id].traffic_class

    @property
    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    def schedule(self, now: float, more_coming: bool) -> StepPlan | None:
        """The next step's plan, or None when nothing should run now. more_coming says whether
        any request may still arrive without further progress of the running ones."""
        raise NotImplementedError

    def next_wakeup(self) -> float | None:
        """A time at which schedule may have work although nothing new arrived (or None)."""
        return None

    def finish(self, seq: Sequence) -> None:
        """A sequence ended in the last step: free its slot and its KV blocks at once."""
        self.running.remove(seq)
        self.engine.release(seq)
        self.arrival_s.pop(seq.id, None)
        if self.traffic is not None:
            self.traffic.forget(seq.id)

    def abort(self, seq: Sequence) -> None:
        """Drop a sequence between steps wherever it is (its client went away): waiting, or
        holding a slot and blocks, which are free for the next step."""
        if seq in self.running:
            self.finish(seq)
            return
        if seq in self.waiting:
            self.waiting.remove(seq)
        self.arrival_s.pop(seq.id, None)
        if self.traffic is not None:
            self.traffic.forget(seq.id)

    def release_all(self) -> None:
        """Give every block back (end of a run, normal or not)."""
        for seq in self.running:
            self.engine.release(seq)
        self.running.clear()
        self.waiting.clear()


class StaticScheduler(Scheduler):
    """Launch when full or drained; run the batch to its end; admit nothing meanwhile."""

    def should_launch(self, now: float, more_coming: bool) -> bool:
        return len(self.waiting) >= self.config.max_batch or not more_coming

    batch_size = 0  # members the batch in flight was launched with

    def schedule(self, now: float, more_coming: bool) -> StepPlan | None:
        if self.running:  # the batch in flight: every unfinished member decodes one token
            for seq in self.running:
                if not self.engine.reserve(seq, 1):  # cannot happen: reserved at launch
                    raise MemoryError("a launched static batch ran out of KV blocks")
            return StepPlan(decode=list(self.running),
                            padding=self.batch_size - len(self.running))
        if not self.waiting or not self.should_launch(now, more_coming):
            return None
        batch = self._take_batch()
        for seq in batch:
            cached = self.engine.blocks.cached_prefix(seq)  # 0 unless prefix caching hits
            self.engine.reserve(seq, seq.num_uncomputed - cached, cached)
        self.running = batch
        self.batch_size = len(batch)
        return StepPlan(prefill=[(s, s.num_uncomputed) for s in batch], admitted=list(batch))

    def _take_batch(self) -> list[Sequence]:
        """Up to max_batch waiting requests, in arrival order, whose full lengths fit the free
        KV blocks together (the first always fits: requests are checked against the pool). A
        member's need is the most blocks it holds at once (engine.blocks_per_sequence: a hybrid
        model's window layers hold fewer than its full layers)."""
        free = self.engine.blocks.num_free
        batch: list[Sequence] = []
        while self.waiting and len(batch) < self.config.max_batch:
            seq = self.waiting[0]
            need = self.engine.blocks_per_sequence(
                kv_tokens_needed(len(seq.prompt_ids), seq.max_new_tokens),
                prefill=seq.num_uncomputed)
            if batch and need > free:
                break
            free -= need
            batch.append(self.waiting.popleft())
        return batch


class DynamicScheduler(StaticScheduler):
    """Static batches, launched when full or when the oldest waiting request timed out."""

    def oldest_deadline(self) -> float:
        return self.arrival_s[self.waiting[0].id] + self.config.timeout_ms / 1000

    def should_launch(self, now: float, more_coming: bool) -> bool:
        return len(self.waiting) >= self.config.max_batch or now >= self.oldest_deadline()

    def next_wakeup(self) -> float | None:
        if self.running or not self.waiting:
            return None
        return self.oldest_deadline()


class ContinuousScheduler(Scheduler):
    """Iteration-level scheduling: decodes first, then prefill chunks, refilling free slots."""

    def chunk(self, seq: Sequence, budget: float, cached: int = 0) -> int:
        """Tokens of seq's prefill to run now: one chunk, within the budget; 0 if it must wait
        (a whole prompt that does not fit what is left of the budget, when unchunked). `cached`
        tokens (a prefix-cache hit at admission) are skipped, not run."""
        size, left = self.config.chunk_size, seq.num_uncomputed - cached
        if size == 0:
            return left if left <= budget else 0
        return int(min(size, left, budget))

    def next_wakeup(self) -> float | None:
        """With traffic classes: when a quota's bucket lets a waiting request in."""
        if self.traffic is None or not self.waiting:
            return None
        return self.traffic.next_ready([s.id for s in self.waiting])

    def schedule(self, now: float, more_coming: bool) -> StepPlan | None:
        plan = StepPlan()
        budget = self.config.token_budget or float("inf")
        # Running sequences not yet given a place in this plan, in admission order: the
        # newest of them is the one preempted when blocks run out.
        unplaced = list(self.running)
        decoding = [s for s in self.running if s.num_computed > 0 and s.num_uncomputed == 1]
        prefilling = [s for s in self.running if s not in decoding]
        for seq in decoding + prefilling:
            if seq not in unplaced:
                continue  # preempted earlier in this pass
            decode = seq in decoding
            n = 1 if decode else self.chunk(seq, budget)
            if n == 0 or n > budget:
                continue  # the budget is spent: it keeps its slot and blocks, and waits a step
            while not self.engine.reserve(seq, n):
                victim = unplaced.pop()  # the newest not yet placed; maybe seq itself
                self._preempt(victim, plan)
                if victim is seq:
                    break
            else:
                unplaced.remove(seq)
                budget -= n
                if decode:
                    plan.decode.append(seq)
                else:
                    plan.prefill.append((seq, n))
        if not plan.preempted or plan.empty:  # blocks are short: admitting would thrash
            self._admit(plan, budget, now)
        return None if plan.empty else plan

    def _next_waiting(self, now: float) -> Sequence | None:
        """The request admission considers next: the oldest, or the one the traffic classes
        pick (None: every waiting request must wait for now)."""
        if self.traffic is None:
            return self.waiting[0]
        picked = self.traffic.pick([s.id for s in self.waiting],
                                   [s.id for s in self.running], now)
        return next((s for s in self.waiting if s.id == picked), None)

    def _admit(self, plan: StepPlan, budget: float, now: float = 0.0) -> None:
        """Waiting requests into free slots, in queue order (or the traffic classes' order),
        while budget and blocks last. Admission never preempts: a request that does not fit
        waits (and so does everyone behind it, first come first served)."""
        while self.waiting and len(self.running) < self.config.max_batch and budget > 0:
            seq = self._next_waiting(now)
            if seq is None:
                return
            cached = self.engine.blocks.cached_prefix(seq)  # 0 unless prefix caching hits
            n = self.chunk(seq, budget, cached)
            if n == 0 or not self.engine.reserve(seq, n, cached):
                return
            self.waiting.remove(seq)
            if self.traffic is not None:
                self.traffic.admit(seq.id, now)
            self.running.append(seq)
            plan.admitted.append(seq)
            plan.prefill.append((seq, n))
            budget -= n

    def _preempt(self, seq: Sequence, plan: StepPlan) -> None:
        self.preempt(seq)
        plan.preempted.append(seq)

    def preempt(self, seq: Sequence) -> None:
        """Preemption by recompute: free seq's blocks (its cached tokens are forgotten, its
        output kept) and put it at the front of the queue. Also between steps, for a live
        change of the limits (engine.serve.class_knobs)."""
        self.running.remove(seq)
        self.engine.release(seq)
        self.waiting.appendleft(seq)


def make_scheduler(engine: LLMEngine, config: SchedulerConfig) -> Scheduler:
    config.validate()
    kind = {"static": StaticScheduler, "dynamic": DynamicScheduler,
            "continuous": ContinuousScheduler}[config.policy]
    return kind(engine, config)
