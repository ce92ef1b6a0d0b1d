"""The results of jobs that serve requests on the engine: a generation, the two clocks, a served
run and a load test, the block-table snapshots and a rate sweep."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar

from .record import Record
from .shared import (
    LoadTestWorkload,
    Measured,
    Percentiles,
    RequestRecord,
    RunMetrics,
    SchedulerSettings,
    StepRecord,
    TokenAt,
    TokenTime,
    WorkloadSettings,
)


@dataclass(frozen=True)
class GenerateResult(Measured):
    job_kind: ClassVar[str] = "generate"
    device: str
    preset: str
    weights: str
    prompt: str
    prompt_tokens: int
    text: str
    tokens: list[TokenTime]
    ttft_ms: float
    tpot_ms: float | None


@dataclass(frozen=True)
class ReaderMetrics(Record):
    """The reader's request alone: TTFT split into queue and prefill, TPOT, ITL, E2E."""

    ttft_ms: float
    queue_ms: float
    prefill_ms: float
    tpot_ms: float | None
    itl_ms: Percentiles
    e2e_ms: float
    user_tokens_per_s: float | None
    output_tokens: int


@dataclass(frozen=True)
class PhaseTimes(Record):
    """One request's time by phase in ms (engine.serve.phases): what is left between the
    engine's steps is other; they add up to e2e."""

    tokenize_ms: float
    queue_ms: float
    prefill_ms: float
    decode_ms: float
    detokenize_ms: float
    other_ms: float
    e2e_ms: float


@dataclass(frozen=True)
class TwoClocksResult(Measured):
    job_kind: ClassVar[str] = "two_clocks"
    device: str
    preset: str
    weights: str
    stream: bool
    prompt_tokens: int
    text_tokens: int
    context_tokens: int
    max_new_tokens: int
    background: int
    text: str
    tokens: list[TokenAt]
    arrival_ms: float
    admitted_ms: float
    first_token_ms: float
    finish_ms: float
    metrics: ReaderMetrics
    sequences_per_step: float
    phases: PhaseTimes | None = dataclasses.field(default=None, metadata={"omit_none": True})


@dataclass(frozen=True)
class ServedRun(Measured):
    """A run of the serving loop (engine.serve.loop.RunResult.to_json): the `python -m engine
    run --json` object, less its workload, which each job describes its own way."""

    device: str
    preset: str
    weights: str
    policy: str
    config: SchedulerSettings
    cancelled: bool
    kv_blocks_total: int
    block_size: int
    requests: list[RequestRecord]
    steps: list[StepRecord]
    metrics: RunMetrics


@dataclass(frozen=True)
class ServeRunResult(ServedRun):
    """A seeded workload served under a policy."""

    job_kind: ClassVar[str] = "serve_run"
    workload: WorkloadSettings


@dataclass(frozen=True)
class LoadTestResult(ServedRun):
    """The load test's mix served; each request has its size."""

    job_kind: ClassVar[str] = "load_test"
    workload: LoadTestWorkload


@dataclass(frozen=True)
class SnapshotSeq(Record):
    """A live sequence in a step: its block table and the tokens it holds."""

    id: int
    blocks: list[int]
    tokens: int
    phase: str


@dataclass(frozen=True)
class BlockSnapshot(Record):
    """The block tables after one step."""

    seqs: list[SnapshotSeq]
    free: int
    step: int
    t_s: float
    finished: list[int]


@dataclass(frozen=True)
class SnapshotRequest(Record):
    id: int
    arrival_s: float | None
    finish_s: float | None
    prompt_len: int
    output_len: int
    preemptions: int


@dataclass(frozen=True)
class BlockSnapshotsResult(Measured):
    job_kind: ClassVar[str] = "block_snapshots"
    device: str
    preset: str
    weights: str
    num_blocks: int
    block_size: int
    bytes_per_block: int
    kv_budget_mib: int
    requests: list[SnapshotRequest]
    snapshots: list[BlockSnapshot]


@dataclass(frozen=True)
class RatePoint(Record):
    """One run at one rate of a rate sweep: per-request lists (so SLOs can be applied later)
    and totals; `run` numbers the runs at a rate (None in a sweep of one run per rate). Also
    the data of the sweep's "step" events (with kind "rate_point")."""

    rate: float
    requests: int
    completed: int
    duration_s: float | None
    output_tokens: int
    throughput_tok_s: float | None
    requests_per_s: float | None
    ttft_ms: list[float]
    tpot_ms: list[float | None]
    e2e_ms: list[float]
    output_len: list[int]
    itl_p50_ms: float | None
    itl_p99_ms: float | None
    itl_max_ms: float | None
    preemptions: int
    slot_use: float | None
    failed: int | None = dataclasses.field(default=None, metadata={"omit_none": True})  # HTTP
    run: int | None = dataclasses.field(default=None, metadata={"omit_none": True})  # 1, 2, ...


@dataclass(frozen=True)
class RateSweepResult(Measured):
    job_kind: ClassVar[str] = "rate_sweep"
    device: str
    preset: str
    weights: str
    max_batch: int
    chunk_size: int
    workload: WorkloadSettings
    points: list[RatePoint]
