"""The class run's settings and the live knobs (engine.serve.class_run): what the teacher may
change while the run goes on, and how each change reaches the engine between two steps.

- max batch and chunked prefill: the scheduler reads its config at every step, so a new config
  applies from the next one. A lower batch limit than the requests holding a slot now preempts
  the newest of them (preemption by recompute: they keep their output and wait at the front of
  the queue), so no step after the change holds more than the new limit.
- policy: a new scheduler takes over the queue. Requests holding a slot go back to the front of
  its queue by preemption (a static batch's slots are not a continuous batch's), in admission
  order, then the requests that waited.
- prefix cache: the block manager turns caching on or off (BlockManager.set_prefix_caching);
  off, every cached prefix is forgotten.
- background rate: the run's synthetic arrivals (class_run) follow the new rate at once.
- lanes: on, the scheduler serves two traffic classes (engine/traffic.py): the students'
  requests in an interactive lane with strict priority over the background load's batch lane,
  which holds at most half the batch limit's slots (rounded up). Turned on, every request in
  the scheduler is put in its lane (its Request.traffic_class) and the newest background
  requests holding a slot past the batch lane's share are preempted (by recompute: they keep
  their output); turned off, one queue again and nobody is preempted. A new batch limit moves
  the batch lane's share with it. Lanes need the continuous policy (static and dynamic batches
  have no free slot to give first): a lanes change under another policy, or a policy change
  away from continuous while lanes are on, is refused.

chunk_size here is the chunked prefill's per-step budget of prefill tokens: 0 prefills each
prompt whole in one step (chunked prefill off), else prompts prefill in chunks of that many
tokens and a step holds at most that many prefill tokens beside its decodes.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields, replace

from ..config import POLICIES
from ..errors import ConfigError
from ..lab.registry import check_class_settings
from ..llm_engine import LLMEngine
from ..scheduler import SchedulerConfig, make_scheduler
from ..traffic import TrafficClass, TrafficPolicy, TrafficState
from .loop import EngineLoop, check_config

LIVE_KNOBS = ("policy", "max_batch", "chunk_size", "prefix_cache", "background_rps", "lanes")
MAX_BACKGROUND_RPS = 50.0
DYNAMIC_TIMEOUT_MS = 50.0  # the dynamic policy's wait for a fuller batch
INTERACTIVE, BATCH = "interactive", "batch"  # the lanes: the students', the background load's


def batch_lane_slots(max_batch: int) -> int:
    """Slots the background load's lane may hold with lanes on: half the batch limit, rounded
    up, so the students always find the rest."""
    return (max_batch + 1) // 2


def lanes_policy(max_batch: int) -> TrafficPolicy:
    """The two lanes as the engine's traffic classes: interactive first (strict priority), the
    batch lane capped at batch_lane_slots."""
    return TrafficPolicy((TrafficClass(INTERACTIVE, priority=1),
                          TrafficClass(BATCH, priority=0,
                                       max_running=batch_lane_slots(max_batch))),
                         order="strict")


@dataclass(frozen=True)
class ClassSettings:
    """The class run's settings (engine.lab.registry's class_run params hold the same names)."""

    policy: str = "continuous"
    max_batch: int = 16
    chunk_size: int = 0
    prefix_cache: bool = False
    background_rps: float = 0.0
    lanes: bool = False
    max_prompt_tokens: int = 256
    max_tokens: int = 64
    per_student_per_min: int = 20

    @classmethod
    def of(cls, params: dict) -> ClassSettings:
        """The settings among params (a job's: other keys are left out)."""
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in params.items() if k in names})

    def validate(self) -> None:
        if self.policy not in POLICIES:
            raise ConfigError(f"unknown policy {self.policy!r}: choose one of "
                              f"{', '.join(POLICIES)}")
        for name, lo in (("max_batch", 1), ("chunk_size", 0), ("max_prompt_tokens", 1),
                         ("max_tokens", 1), ("per_student_per_min", 1)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < lo:
                raise ConfigError(f"{name.replace('_', ' ')} must be a whole number of at "
                                  f"least {lo} (got {value!r})")
        if not isinstance(self.prefix_cache, bool):
            raise ConfigError(f"prefix cache must be true or false (got {self.prefix_cache!r})")
        if not isinstance(self.lanes, bool):
            raise ConfigError(f"lanes must be true or false (got {self.lanes!r})")
        check_class_settings(asdict(self))
        rate = self.background_rps
        if (isinstance(rate, bool) or not isinstance(rate, (int, float))
                or not (0 <= rate <= MAX_BACKGROUND_RPS and math.isfinite(rate))):
            raise ConfigError(f"background rate must be 0 to {MAX_BACKGROUND_RPS:g} requests "
                              f"per second (got {rate!r})")

    def scheduler_config(self) -> SchedulerConfig:
        chunk = self.chunk_size
        return SchedulerConfig(policy=self.policy, max_batch=self.max_batch,
                               timeout_ms=DYNAMIC_TIMEOUT_MS, chunk_size=chunk,
                               max_tokens_per_step=chunk + self.max_batch if chunk else None,
                               traffic=lanes_policy(self.max_batch) if self.lanes else None)

    def to_json(self) -> dict:
        return asdict(self)


def changed(settings: ClassSettings, changes: dict) -> ClassSettings:
    """The settings after a live change; ConfigError for a knob that is not live or a bad
    value."""
    if not isinstance(changes, dict) or not changes:
        raise ConfigError("no change given: name one of " + ", ".join(LIVE_KNOBS))
    unknown = sorted(set(changes) - set(LIVE_KNOBS))
    if unknown:
        raise ConfigError(f"{unknown[0]!r} cannot be changed while the run goes on (live "
                          f"settings: {', '.join(LIVE_KNOBS)})")
    new = replace(settings, **changes)
    new.validate()
    return new


def apply(loop: EngineLoop, old: ClassSettings, new: ClassSettings) -> list[int]:
    """Make the engine run under `new` from its next step (between two steps: the module
    docstring says how each knob lands). Returns the ids of the requests preempted for it."""
    engine = loop.engine
    config = new.scheduler_config()
    check_config(engine, config)
    if new.prefix_cache != old.prefix_cache:
        set_prefix_cache(engine, new.prefix_cache)
    if new.policy != old.policy:
        preempted = switch_policy(loop, config)
    else:
        loop.config = loop.scheduler.config = config
        preempted = []
    preempted += trim_batch(loop)
    set_lanes(loop, config.traffic)
    return preempted + trim_batch_lane(loop)


def set_prefix_cache(engine: LLMEngine, on: bool) -> None:
    try:
        engine.blocks.set_prefix_caching(on)
    except ValueError as e:
        raise ConfigError(str(e)) from None


def switch_policy(loop: EngineLoop, config: SchedulerConfig) -> list[int]:
    """A new scheduler under config takes over: the requests holding a slot wait again at the
    front (preempted by recompute), then those that waited."""
    old = loop.scheduler
    new = make_scheduler(loop.engine, config)
    preempted = list(old.running)
    for seq in preempted:
        loop.engine.release(seq)
    old.running.clear()
    new.waiting.extend(preempted)
    new.waiting.extend(old.waiting)
    old.waiting.clear()
    new.arrival_s.update(old.arrival_s)
    loop.scheduler, loop.config = new, config
    return [s.id for s in preempted]


def trim_batch(loop: EngineLoop) -> list[int]:
    """Preempt the newest running requests past the batch limit (by recompute, to the front
    of the queue)."""
    scheduler, limit = loop.scheduler, loop.config.max_batch
    preempted = []
    while len(scheduler.running) > limit:
        seq = scheduler.running[-1]
        scheduler.preempt(seq)
        preempted.append(seq.id)
    if preempted and hasattr(scheduler, "batch_size"):  # a static batch in flight: its size
        scheduler.batch_size = min(scheduler.batch_size, len(scheduler.running))
    return preempted


def lane(loop: EngineLoop, seq_id: int) -> str:
    """The lane a request of the run belongs in: the traffic class its Request named."""
    return loop.live[seq_id].trace.traffic_class or INTERACTIVE


def set_lanes(loop: EngineLoop, traffic: TrafficPolicy | None) -> None:
    """The scheduler's traffic classes under `traffic` (None: one queue). Requests that have no
    lane yet (lanes just turned on, or a new scheduler took over) arrive in theirs, and those
    holding a slot count as admitted; a new batch limit only moves the batch lane's share."""
    scheduler = loop.scheduler
    if traffic is None:
        scheduler.traffic = None
        return
    if scheduler.traffic is None:
        scheduler.traffic = TrafficState(traffic)
    state = scheduler.traffic
    state.policy = traffic
    now = loop.clock()
    for seq in [*scheduler.running, *scheduler.waiting]:
        if seq.id in state.tags:
            continue
        state.arrive(seq.id, lane(loop, seq.id), None, len(seq.prompt_ids), seq.max_new_tokens,
                     [], now)
        if seq in scheduler.running:
            state.admit(seq.id, now)


def trim_batch_lane(loop: EngineLoop) -> list[int]:
    """With lanes on, preempt the newest background requests holding a slot past the batch
    lane's share (by recompute, to the front of the queue, where the strict priority still
    puts any waiting student's request first)."""
    scheduler, traffic = loop.scheduler, loop.config.traffic
    if traffic is None:
        return []
    cap = traffic.get(BATCH).max_running
    batch = [seq for seq in scheduler.running if scheduler.traffic_class(seq.id) == BATCH]
    preempted = list(reversed(batch[cap:]))
    for seq in preempted:
        scheduler.preempt(seq)
    return [seq.id for seq in preempted]
