"""Typed results: one record per job kind, and the records they are made of.

A job's result crosses a process boundary and sits in the disk cache as JSON; these records are
its shape, written down once. `Record.from_dict` checks a result dict (every field present, of
its type; no unknown field) and raises ResultError naming the first field that is wrong;
`to_dict` gives the JSON dict back (from_dict(d).to_dict() == d). Field names are the JSON keys,
so `result["metrics"]["ttft_ms"]["p99"]` reads `result.metrics.ttft_ms.p99`. Torch-free.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass
from functools import cache
from typing import Any, ClassVar, TypeVar

from ..errors import ResultError

R = TypeVar("R", bound="Record")


class Record:
    """A result record (a dataclass): from_dict checks shape and types; to_dict is JSON-ready."""

    job_kind: ClassVar[str] = ""  # the job kind whose result this is ("" for nested records)

    @classmethod
    def from_dict(cls: type[R], data: Any, where: str = "") -> R:
        where = where or (f"{cls.job_kind} result" if cls.job_kind else cls.__name__)
        if not isinstance(data, dict):
            raise ResultError(f"{where} must be an object (got {type(data).__name__})")
        hints = _hints(cls)
        unknown = sorted(set(data) - set(hints))
        if unknown:
            raise ResultError(f"{where} has an unknown field {unknown[0]!r}")
        values = {}
        for f in dataclasses.fields(cls):
            if f.name not in data:
                if f.default is not dataclasses.MISSING:
                    continue
                raise ResultError(f"{where} has no field {f.name!r}")
            values[f.name] = _convert(data[f.name], hints[f.name], f"{where}: {f.name}")
        return cls(**values)

    def to_dict(self) -> dict:
        return {f.name: _plain(getattr(self, f.name)) for f in dataclasses.fields(self)
                if not (getattr(self, f.name) is None and f.default is None
                        and f.metadata.get("omit_none"))}


def _plain(value: Any) -> Any:
    if isinstance(value, Record):
        return value.to_dict()
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


@cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


_NAMES = {int: "a whole number", float: "a number", str: "text", bool: "true or false"}


def _convert(value: Any, tp: Any, where: str) -> Any:
    """value checked against the type annotation tp (nested records built)."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        options = typing.get_args(tp)
        if value is None and type(None) in options:
            return None
        errors = []
        for option in options:
            if option is type(None):
                continue
            try:
                return _convert(value, option, where)
            except ResultError as e:
                errors.append(str(e))
        raise ResultError(errors[0] if len(errors) == 1 else
                          f"{where} has an unexpected value {value!r}")
    if origin is list:
        if not isinstance(value, list):
            raise ResultError(f"{where} must be a list (got {type(value).__name__})")
        (item,) = typing.get_args(tp) or (Any,)
        return [_convert(v, item, f"{where}[{i}]") for i, v in enumerate(value)]
    if origin is dict or tp is dict:
        if not isinstance(value, dict):
            raise ResultError(f"{where} must be an object (got {type(value).__name__})")
        return value
    if isinstance(tp, type) and issubclass(tp, Record):
        return tp.from_dict(value, where)
    if tp is Any:
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ResultError(f"{where} must be a number (got {value!r})")
        return value
    if tp is int and (isinstance(value, bool) or not isinstance(value, int)):
        raise ResultError(f"{where} must be a whole number (got {value!r})")
    if tp in (str, bool) and not isinstance(value, tp):
        raise ResultError(f"{where} must be {_NAMES[tp]} (got {value!r})")
    return value


# ---- records that several results share --------------------------------------------------------------
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


# ---- one record per job kind ---------------------------------------------------------------------------
@dataclass(frozen=True)
class InfoResult(Measured):
    job_kind: ClassVar[str] = "info"
    device: str
    device_name: str
    torch: str
    threads: int
    presets: list[PresetShape]
    memory_bandwidth_gbs: float
    matmul_gflops: float
    matmul_dtype: str
    ridge_flop_per_byte: float
    limits_measured_at: str
    cache_bandwidth_gbs: float | None = None  # read bandwidth within the last-level cache
    llc_bytes: int | None = None  # that cache's size; None where the OS does not say


@dataclass(frozen=True)
class SweepPointResult(Measured):
    """One batch size of the sweep (engine.sweep.SweepPoint) and the engine that ran it."""

    job_kind: ClassVar[str] = "sweep_point"
    device: str
    preset: str
    weights: str
    backend: str
    weight_bytes: int
    batch_size: int
    ttft_ms: float
    tpot_ms: float
    tokens_per_s: float
    kv_bytes: int
    prompt_len: int
    new_tokens: int
    decode_steps_timed: int
    step_ms_p10: float
    step_ms_p90: float
    bytes_per_step: int
    achieved_gbs: float
    flops_per_step: float
    prefill_tokens_per_s: float
    # every timed decode step in ms (warm-up excluded); None in results cached before it was kept
    step_ms: list[float] | None = dataclasses.field(default=None, metadata={"omit_none": True})
    # "batch" (the batch's prompts prefilled together) or "shared" (one prompt prefilled once and
    # copied: ttft_ms is then that one prompt's, engine.sweep); None in results cached before
    prefill: str | None = dataclasses.field(default=None, metadata={"omit_none": True})


@dataclass(frozen=True)
class PrefillPointResult(Measured):
    job_kind: ClassVar[str] = "prefill_point"
    device: str
    preset: str
    weights: str
    dtype: str
    batch_size: int
    prompt_len: int
    ms: float
    ms_all: list[float]
    flops: float
    bytes: float
    intensity: float
    achieved_gflops: float
    tokens_per_s: float
    weight_bytes: int
    kv_bytes_per_token: int


@dataclass(frozen=True)
class SetupResult(Record):
    """The app's first-start set-up (engine.lab.jobs.setup): the kernels' state ("built",
    "unavailable" with why in one line, "not needed" on a GPU), the presets made ready, the path
    results are measured on from now ("fast" or "plain"), and the seconds it took."""

    job_kind: ClassVar[str] = "setup"
    kernels: str
    kernel_message: str
    presets: list[str]
    path: str
    seconds: float


@dataclass(frozen=True)
class KVCacheRow(Record):
    """One preset's cache in one dtype: what the engine really allocated."""

    preset: str
    dtype: str
    engine_dtype: bool
    element_bytes: int
    layers: int
    kv_heads: int
    head_dim: int
    num_blocks: int
    block_size: int
    capacity_tokens: int
    allocated_bytes: int
    bytes_per_token: int
    tensor_shape: list[int]


@dataclass(frozen=True)
class KVAllocationResult(Measured):
    job_kind: ClassVar[str] = "kv_allocation"
    device: str
    blocks: int
    block_size: int
    caches: list[KVCacheRow]


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
class EndpointLoadTestResult(Record):
    """The load test's mix sent over HTTP to an OpenAI-compatible server and timed at the
    client (engine.serve.bench_client): no engine steps and no admission times, which only the
    server knows; failed requests are counted and left out of the metrics, as vLLM does."""

    job_kind: ClassVar[str] = "endpoint_load_test"
    base_url: str
    model: str
    cancelled: bool
    duration_s: float
    requests: list[RequestRecord]
    metrics: RunMetrics
    failed: int
    first_error: str | None
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
class Int8PointResult(SweepPointResult):
    """One batch size of the sweep on an engine with the weights given (fp32 or int8): the
    quantization lesson's sweep_point, kept apart so sweep_point's cached results stay valid."""

    job_kind: ClassVar[str] = "int8_point"
    weight_format: str = dataclasses.field(kw_only=True)  # after sweep_point's optional step_ms


@dataclass(frozen=True)
class ExpertsPointResult(SweepPointResult):
    """One batch size of the sweep on an MoE or dense preset (engine.experts.ExpertsPoint): the
    distinct experts each layer read per decode step (mean over steps and layers, each layer's,
    each step's), a uniform router's expectation, and the weight bytes a step read from the
    measured count; a dense preset's counts are 0."""

    job_kind: ClassVar[str] = "experts_point"
    experts: int = dataclasses.field(kw_only=True)
    top_k: int = dataclasses.field(kw_only=True)
    active_params: int = dataclasses.field(kw_only=True)
    total_params: int = dataclasses.field(kw_only=True)
    experts_read: float = dataclasses.field(kw_only=True)
    experts_read_layers: list[float] = dataclasses.field(kw_only=True)
    experts_read_steps: list[float] = dataclasses.field(kw_only=True)
    expected_experts: float = dataclasses.field(kw_only=True)
    step_weight_bytes: int = dataclasses.field(kw_only=True)


@dataclass(frozen=True)
class Int8QualityResult(Record):
    """The trained preset with float32 and int8 weights on the corpus's held-out windows
    (engine.quantization.Int8Quality)."""

    job_kind: ClassVar[str] = "int8_quality"
    device: str
    preset: str
    windows: int
    seq_len: int
    positions: int
    loss_fp32: float
    loss_int8: float
    agreement: float


@dataclass(frozen=True)
class EndpointRateSweepResult(Record):
    """The rate sweep's workload sent over HTTP to an OpenAI-compatible server, timed at the
    client; each point counts its failed requests (left out of its figures)."""

    job_kind: ClassVar[str] = "endpoint_rate_sweep"
    base_url: str
    model: str
    workload: WorkloadSettings
    points: list[RatePoint]


@dataclass(frozen=True)
class EndpointConcurrencyResult(Record):
    """N clients streaming at once from an OpenAI-compatible server, timed at the client:
    medians of TTFT and time per token, total output tokens/s (None when nothing finished)."""

    job_kind: ClassVar[str] = "endpoint_concurrency"
    base_url: str
    model: str
    concurrency: int
    prompt_len: int
    new_tokens: int
    completed: int
    failed: int
    first_error: str | None
    ttft_ms: float | None
    tpot_ms: float | None
    tokens_per_s: float | None


@dataclass(frozen=True)
class EndpointStreamResult(Record):
    """The reader's prompt streamed from an OpenAI-compatible server beside N background
    requests, timed at the client (this app's server): the client sees when tokens arrive, not
    how the server split the wait before the first one (queue, prefill), so there is no split."""

    job_kind: ClassVar[str] = "endpoint_stream"
    base_url: str
    model: str
    prompt_tokens: int  # as the server counted them (usage), for its own tokenizer
    max_new_tokens: int
    background: int
    text: str
    tokens: list[TokenAt]
    ttft_ms: float
    tpot_ms: float | None
    itl_ms: Percentiles
    e2e_ms: float
    user_tokens_per_s: float | None
    output_tokens: int
    background_failed: int
    first_error: str | None


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
class InvarianceSeed(Record):
    """One seed's prompt in a batch against the same prompt alone (engine.invariance.compare):
    the first output token that differs (None: the same text), the largest logit difference in
    float32 units in the last place and absolute, and how many of the compared logits differ
    at all, over the tokens computed on the same context."""

    seed: int
    first_diff: int | None
    max_ulp: int
    max_abs: float
    differing_logits: int
    compared_logits: int


@dataclass(frozen=True)
class InvarianceBatch(Record):
    """One batch size (the prompt and batch - 1 others) over every seed: its seeds' records,
    how many seeds' texts differ from the prompt's text alone, the largest differences, and the
    median decode step of the batch (ms; None where no step decoded the whole batch)."""

    batch: int
    seeds: list[InvarianceSeed]
    texts_differ: int
    max_ulp: int
    max_abs: float
    step_ms: float | None


@dataclass(frozen=True)
class InvarianceResult(Measured):
    """The same greedy prompt alone and inside batches (engine.invariance), in the default or
    the batch-invariant mode; chunk 0: prompts prefilled whole, else chunk tokens a step."""

    job_kind: ClassVar[str] = "invariance"
    preset: str
    device: str
    backend: str
    batch_invariant: bool
    chunk: int
    prompt_len: int
    new_tokens: int
    points: list[InvarianceBatch]


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


RESULTS: dict[str, type[Record]] = {r.job_kind: r for r in (
    InfoResult, SweepPointResult, PrefillPointResult, KVAllocationResult, GenerateResult,
    TwoClocksResult, ServeRunResult, LoadTestResult, BlockSnapshotsResult, RateSweepResult,
    PrefixCacheResult, SpeculativeResult, Int8PointResult, Int8QualityResult,
    CapacitySearchResult, EndpointLoadTestResult, EndpointRateSweepResult,
    EndpointConcurrencyResult, EndpointStreamResult, SetupResult, ExpertsPointResult,
    TrafficClassesResult, InvarianceResult, DisaggregationResult)}


def parse_result(kind: str, data: dict) -> Record:
    """The typed record of a job kind's result dict; ResultError if it is malformed."""
    try:
        record = RESULTS[kind]
    except KeyError:
        raise ResultError(f"no result record for job kind {kind!r}") from None
    return record.from_dict(data)



# ---- lesson 6's KV formats (the kv_formats job, engine.lab.jobs.kv_formats) ---------------------
@dataclass(frozen=True)
class KVFormatRow(Record):
    """One KV format on tiny at the job's budget: the pool the engine built, the requests of the
    job's length it admits, and its decode step (median ms, 95% interval, steps timed)."""

    kv_dtype: str  # "float32" (the CPU's own), "float16" or "fp8"
    bytes_per_block: int
    blocks: int
    allocated_bytes: int
    blocks_per_request: int
    requests_fit: int
    step_ms: float
    step_ms_lo: float | None
    step_ms_hi: float | None
    steps_timed: int
    step_ms_all: list[float]


@dataclass(frozen=True)
class KVFormatQuality(Record):
    """fp8 against the float cache on the held-out windows (engine.kv_quality.KVQuality)."""

    preset: str
    windows: int
    positions: int
    loss_float: float
    loss_fp8: float
    agreement: float
    max_logit_diff: float


@dataclass(frozen=True)
class HybridRow(Record):
    """One preset at one context length: the blocks its block manager held growing a sequence
    there (at the end, and the most at once), their bytes, the formula's bytes per token, and
    the requests of that length its pool admits."""

    preset: str
    window: int
    tokens: int
    prompt: int
    blocks_held: int
    blocks_most: int
    bytes_per_block: int
    kv_bytes: int
    bytes_per_token: float
    formula_bytes_per_token: float
    pool_blocks: int
    requests_fit: int


@dataclass(frozen=True)
class KVFormatsResult(Measured):
    """Lesson 6's formats measured: fp8 against the float cache (capacity, step, quality) and
    tiny-hybrid against tiny's full attention (bytes, capacity) at one budget."""

    job_kind: ClassVar[str] = "kv_formats"
    device: str
    preset: str
    weights: str
    budget_mib: int
    block_size: int
    batch_size: int
    prompt_len: int
    new_tokens: int
    formats: list[KVFormatRow]
    quality: KVFormatQuality
    hybrid: list[HybridRow]


RESULTS[KVFormatsResult.job_kind] = KVFormatsResult
