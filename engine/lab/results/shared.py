"""The records that several job kinds' results are made of: percentiles, a run's metrics, one
request's and one step's record, the settings a run used, and what every measured result
carries (Measured: the spread of what it timed and its disturbance check)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from .record import Record


@dataclass(frozen=True)
class Percentiles(Record):
    """A summary of values in ms (engine.serve.metrics.Summary): None in every field for none."""

    mean: float | None
    p50: float | None
    p90: float | None
    p95: float | None
    p99: float | None
    max: float | None
    count: int = 0


@dataclass(frozen=True)
class RunMetrics(Record):
    """A run's metrics (engine.serve.metrics.Metrics)."""

    ttft_ms: Percentiles
    tpot_ms: Percentiles
    itl_ms: Percentiles
    e2e_ms: Percentiles
    queue_ms: Percentiles
    throughput_tok_s: float | None
    requests_per_s: float | None
    goodput_rps: float | None
    completed: int
    output_tokens: int
    duration_s: float | None
    slo_ttft_ms: float | None
    slo_tpot_ms: float | None
    requests_meeting_slo: int | None
    preemptions: int
    slot_use: float | None


@dataclass(frozen=True)
class PhaseSeconds(Record):
    """One request's time by phase in seconds (engine.serve.phases.RequestPhases)."""

    tokenize_s: float
    queue_s: float
    prefill_s: float
    decode_s: float
    detokenize_s: float
    other_s: float
    e2e_s: float
    http_in_s: float = 0.0
    http_out_s: float = 0.0


@dataclass(frozen=True)
class RequestRecord(Record):
    """One request's life, seconds from the run's start (engine.serve.trace.RequestTrace);
    size ("short" or "long") only in a load test."""

    id: int
    arrival_s: float | None
    admitted_s: float | None
    first_token_s: float | None
    finish_s: float | None
    prompt_len: int
    output_len: int
    token_s: list[float]
    preemptions: int
    size: str | None = dataclasses.field(default=None, metadata={"omit_none": True})
    # traffic classes (engine/traffic.py): the lane it ran in, its tenant, why it was refused
    traffic_class: str | None = dataclasses.field(default=None, metadata={"omit_none": True})
    tenant: str | None = dataclasses.field(default=None, metadata={"omit_none": True})
    refused: str | None = dataclasses.field(default=None, metadata={"omit_none": True})
    # Per-phase times (engine.serve.phases): absent from results made before they were kept.
    tokenize_start_s: float | None = dataclasses.field(default=None,
                                                       metadata={"omit_none": True})
    tokenize_end_s: float | None = dataclasses.field(default=None, metadata={"omit_none": True})
    detokenize_s: float | None = dataclasses.field(default=None, metadata={"omit_none": True})
    response_s: float | None = dataclasses.field(default=None, metadata={"omit_none": True})
    received_s: float | None = dataclasses.field(default=None, metadata={"omit_none": True})
    response_end_s: float | None = dataclasses.field(default=None, metadata={"omit_none": True})
    phases: PhaseSeconds | None = dataclasses.field(default=None, metadata={"omit_none": True})


@dataclass(frozen=True)
class StepRecord(Record):
    """One engine step (engine.serve.trace.StepTrace); prefill_chunks are [request id, tokens]."""

    index: int
    start_s: float
    end_s: float
    prefill_tokens: int
    decode_seqs: int
    kv_blocks_used: int
    running: int
    padding_rows: int
    decode_ids: list[int]
    prefill_chunks: list[list[int]]
    admitted_ids: list[int]
    preempted_ids: list[int]
    finished_ids: list[int]


@dataclass(frozen=True)
class SchedulerSettings(Record):
    """engine.scheduler.SchedulerConfig, with the token budget it works out to."""

    policy: str
    max_batch: int
    timeout_ms: float
    chunk_size: int
    max_tokens_per_step: int | None
    token_budget: int | None


@dataclass(frozen=True)
class WorkloadSettings(Record):
    """engine.serve.workload.WorkloadSpec; rate is "inf" when every request arrives at t = 0."""

    kind: str
    requests: int
    rate: float | str
    burstiness: float
    concurrency: int
    prompt_len: list[int]
    output_len: list[int]
    long_prompt_len: int
    long_at_s: float
    seed: int


@dataclass(frozen=True)
class LoadTestWorkload(Record):
    """The load test's mix: a share of long requests, arriving open-loop ("poisson mix", at
    rate) or closed-loop ("closed-loop mix", `users` concurrent users)."""

    kind: str
    rate: float
    requests: int
    long_share: float
    short_prompt: list[int]
    short_output: list[int]
    long_prompt: list[int]
    long_output: list[int]
    seed: int
    users: int = 0


@dataclass(frozen=True)
class TokenTime(Record):
    """One generated token's text and its engine time, seconds from the start."""

    text: str
    t_s: float


@dataclass(frozen=True)
class TokenAt(Record):
    """One of the reader's tokens and when it came, ms after the reader's request arrived."""

    text: str
    t_ms: float


@dataclass(frozen=True)
class PresetShape(Record):
    """A preset as `info` describes it on a device (engine.config.ModelConfig.describe)."""

    name: str
    params: int
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    context: int
    dtype: str
    weights: str
    kv_bytes_per_token: int
    weight_bytes: int


@dataclass(frozen=True)
class Spread(Record):
    """p10, p50 and p90 (ms) of the times a job measured: its decode steps, prefill passes,
    engine steps or token gaps (`what` says which); None for none (engine.lab.quality.spread)."""

    what: str
    count: int
    p10: float | None
    p50: float | None
    p90: float | None


@dataclass(frozen=True)
class DisturbanceCheck(Record):
    """Whether other work disturbed a job while it measured (engine.lab.quality.check): the time
    its threads waited for a core and the hypervisor took from its cores, other processes' CPU
    time on those cores, and a calibration probe before and after against this machine's
    profile. `reasons` says, in words, why it counts as disturbed (empty if not)."""

    disturbed: bool
    reasons: list[str]
    cores: list[int]
    wall_s: float
    cpu_s: float
    wait_s: float
    steal_s: float
    others_cpu_s: float
    probe_before_ms: float | None
    probe_after_ms: float | None
    probe_profile_ms: float | None
    wait_limit: float
    probe_limit: float


@dataclass(frozen=True, kw_only=True)
class Measured(Record):
    """What every job kind's result carries besides its own fields: the spread of what it timed
    and its disturbance check (both None for a job that times nothing), and for a job run on
    one of the worker's engines the path it ran on ("fast" or "plain", LLMEngine.path: its
    speed depends on it; None where not said: results cached before, or no engine). Set by
    the worker."""

    spread: Spread | None
    check: DisturbanceCheck | None
    path: str | None = dataclasses.field(default=None, kw_only=True,
                                         metadata={"omit_none": True})

    @property
    def disturbed(self) -> bool:
        return self.check is not None and self.check.disturbed
