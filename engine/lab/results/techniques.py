"""The results of jobs that compare serving techniques: prefix caching, speculative decoding, the
capacity search, traffic classes and disaggregated prefill."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar

from .record import Record
from .shared import LoadTestWorkload, Measured, RequestRecord, RunMetrics


@dataclass(frozen=True)
class PrefixRequest(Record):
    """One request of a prefix cache run: its prompt, the part the cache gave, its TTFT."""

    id: int
    prompt_tokens: int
    cached_tokens: int
    ttft_ms: float


@dataclass(frozen=True)
class PrefixCacheCounts(Record):
    """The prefix cache's counters over the run (engine.block_manager.PrefixCacheStats)."""

    lookups: int
    lookup_tokens: int
    hits: int
    hit_blocks: int
    tokens_skipped: int
    blocks_shared: int
    evictions: int
    token_hit_rate: float | None
    cached_blocks_at_end: int


@dataclass(frozen=True)
class PrefixCacheResult(Measured):
    """Requests sharing a system prompt, one at a time from a cold start; stats None when the
    cache was off."""

    job_kind: ClassVar[str] = "prefix_cache"
    device: str
    preset: str
    weights: str
    prefix_cache: bool
    shared_prefix_len: int
    block_size: int
    kv_blocks_total: int
    requests: list[PrefixRequest]
    first_ttft_ms: float
    later_ttft_ms: float | None
    stats: PrefixCacheCounts | None


@dataclass(frozen=True)
class SpeculativeResult(Measured):
    """Greedy generation for a batch, plain (method "off", k 0) or speculative: the acceptance
    figures are None when plain, and tokens_per_step is 1."""

    job_kind: ClassVar[str] = "speculative"
    device: str
    preset: str
    weights: str
    method: str
    k: int
    batch_size: int
    prompt_len: int
    new_tokens: int
    tpot_ms: float
    ttft_ms: float
    duration_ms: float
    text: str
    output_ids: list[list[int]]
    target_steps: int
    proposed: int
    accepted: int
    acceptance_rate: float | None
    alpha: float | None
    tokens_per_step: float
    expected_tokens_per_step: float | None
    expected_tokens_per_step_at_k: float | None
    draft_ms: float
    verify_ms: float
    # each prompt's token gaps (ms): tpot_ms is their mean; results from before have none
    gaps_ms: list[list[float]] | None = dataclasses.field(default=None,
                                                         metadata={"omit_none": True})


@dataclass(frozen=True)
class CapacityTrial(Record):
    """One closed-loop run at a load (engine.calc.capacity.Trial), summarized: its P95 TTFT,
    1000 / its median TPOT, its median queue wait, its preemptions, its requests."""

    ttft_p95_ms: float
    per_user_tok_s: float
    queue_ms: float
    preemptions: int
    requests: int | None = dataclasses.field(default=None, metadata={"omit_none": True})


@dataclass(frozen=True)
class CapacityLoad(Record):
    """A load (users) and its trials, judged against the targets on every request of its trials
    pooled: the P95 TTFT and 1000 / the median TPOT, each with its 95% interval (ci_lo, ci_hi),
    the requests they rest on and whether that many bound a P95; the median queue wait, the
    median trial's preemptions. Also the data of the search's "step" events (with kind
    "capacity_load"). Results from before the pooling (the median of trials) have no interval."""

    users: int
    met: bool
    ttft_p95_ms: float
    per_user_tok_s: float
    queue_ms: float
    preemptions: int
    trials: list[CapacityTrial]
    ttft_ci_lo: float | None = dataclasses.field(default=None, metadata={"omit_none": True})
    ttft_ci_hi: float | None = dataclasses.field(default=None, metadata={"omit_none": True})
    requests: int | None = dataclasses.field(default=None, metadata={"omit_none": True})
    ttft_bounded: bool | None = dataclasses.field(default=None, metadata={"omit_none": True})
    per_user_ci_lo: float | None = dataclasses.field(default=None, metadata={"omit_none": True})
    per_user_ci_hi: float | None = dataclasses.field(default=None, metadata={"omit_none": True})


@dataclass(frozen=True)
class CapacitySearchResult(Measured):
    job_kind: ClassVar[str] = "capacity_search"
    device: str
    preset: str
    weights: str
    max_batch: int
    users: int
    first_failing_users: int | None
    cause: str
    verdict: str
    trials_run: int
    loads: list[CapacityLoad]
    disturbed_reruns: int = 0  # trials the disturbance check found disturbed, run again
    grid: list[int] | None = dataclasses.field(default=None,  # the loads it could try
                                               metadata={"omit_none": True})


@dataclass(frozen=True)
class MixSettings(Record):
    """engine.traffic_mix.MixSpec: chat requests, a batch job, a flooding tenant."""

    kind: str
    chat_requests: int
    chat_rate: float | str
    chat_prompt: list[int]
    chat_output: list[int]
    users: int
    batch_requests: int
    batch_prompt: list[int]
    batch_output: list[int]
    flood_requests: int
    flood_rate: float | str
    seed: int


@dataclass(frozen=True)
class TrafficRun(Record):
    """One way of serving the mix: "fifo", "lanes", "flood" or "quota"; classes is the
    --classes text (None: one FIFO queue)."""

    name: str
    classes: str | None
    flood_requests: int
    duration_s: float
    requests: list[RequestRecord]


@dataclass(frozen=True)
class TrafficClassesResult(Measured):
    """The mix served one FIFO queue, with lanes, with a flood, with a quota (lesson 16)."""

    job_kind: ClassVar[str] = "traffic_classes"
    device: str
    preset: str
    weights: str
    max_batch: int
    chunk_size: int
    workload: MixSettings
    lanes: str
    quota: str
    runs: list[TrafficRun]

    def run(self, name: str) -> TrafficRun:
        return next(r for r in self.runs if r.name == name)


@dataclass(frozen=True)
class DisaggRequest(Record):
    """One request of an arm: its size ("short" or "long"), prompt, TTFT, its largest gap
    between tokens and (disaggregated) its handover."""

    id: int
    size: str
    prompt_len: int
    ttft_ms: float
    itl_max_ms: float | None
    handover_ms: float | None


@dataclass(frozen=True)
class DisaggArm(Record):
    """One way of serving the workload: arm is colocated, chunked or disaggregated; how says
    "measured live" or "computed from measured step costs (replay)" (label: the sentence the
    CLI prints)."""

    arm: str
    how: str
    label: str
    chunk_size: int
    metrics: RunMetrics
    requests: list[DisaggRequest]


@dataclass(frozen=True)
class DisaggregationResult(Measured):
    """One mixed workload served colocated (whole prompts, then chunked prefill, both live) and
    disaggregated (live where the engine has two cores, else replayed on measured costs);
    costs: the replay's measured cost tables ({} when live)."""

    job_kind: ClassVar[str] = "disaggregation"
    device: str
    preset: str
    weights: str
    max_batch: int
    kv_bytes_per_token: int
    workload: LoadTestWorkload
    arms: list[DisaggArm]
    costs: dict

    @property
    def provenance(self) -> str:
        """How the result came about, for its status line when not all of it was measured
        live ("" when it was)."""
        computed = [a.arm for a in self.arms if a.how != "measured live"]
        if not computed:
            return ""
        return (f"the {', '.join(computed)} run computed from measured step costs (replay), "
                "the others measured live")
