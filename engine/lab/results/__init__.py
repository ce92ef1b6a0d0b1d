"""Typed results: one record per job kind, and the records they are made of.

A job's result crosses a process boundary and sits in the disk cache as JSON; these records are
its shape, written down once. `Record.from_dict` checks a result dict (every field present, of
its type; no unknown field) and raises ResultError naming the first field that is wrong;
`to_dict` gives the JSON dict back (from_dict(d).to_dict() == d). Field names are the JSON keys,
so `result["metrics"]["ttft_ms"]["p99"]` reads `result.metrics.ttft_ms.p99`. Torch-free.

The records live by family: record (the base), shared (what several results are made of),
points (one point or fact of the machine), serving (runs that serve requests), endpoint (an
HTTP endpoint's), techniques (the serving techniques' comparisons), classroom (the class
run's). Every record is importable from here, as `from engine.lab.results import X`.
"""

from __future__ import annotations

from ...errors import ResultError
from .classroom import ClassRunResult
from .endpoint import (  # noqa: F401 (re-exported)
    EndpointConcurrencyResult,
    EndpointLoadTestResult,
    EndpointRateSweepResult,
    EndpointStreamResult,
)
from .kv_formats import HybridRow, KVFormatQuality, KVFormatRow, KVFormatsResult  # noqa: F401
from .points import (  # noqa: F401 (re-exported)
    ExpertsPointResult,
    InfoResult,
    Int8PointResult,
    Int8QualityResult,
    InvarianceBatch,
    InvarianceResult,
    InvarianceSeed,
    KVAllocationResult,
    KVCacheRow,
    PrefillPointResult,
    SetupResult,
    SweepPointResult,
)
from .record import Record
from .serving import (  # noqa: F401 (re-exported)
    BlockSnapshot,
    BlockSnapshotsResult,
    GenerateResult,
    LoadTestResult,
    PhaseTimes,
    RatePoint,
    RateSweepResult,
    ReaderMetrics,
    ServedRun,
    ServeRunResult,
    SnapshotRequest,
    SnapshotSeq,
    TwoClocksResult,
)
from .shared import (  # noqa: F401 (re-exported)
    DisturbanceCheck,
    LoadTestWorkload,
    Measured,
    Percentiles,
    PhaseSeconds,
    PresetShape,
    RequestRecord,
    RunMetrics,
    SchedulerSettings,
    Spread,
    StepRecord,
    TokenAt,
    TokenTime,
    WorkloadSettings,
)
from .techniques import (  # noqa: F401 (re-exported)
    CapacityLoad,
    CapacitySearchResult,
    CapacityTrial,
    DisaggArm,
    DisaggregationResult,
    DisaggRequest,
    MixSettings,
    PrefixCacheCounts,
    PrefixCacheResult,
    PrefixRequest,
    SpeculativeResult,
    TrafficClassesResult,
    TrafficRun,
)

RESULTS: dict[str, type[Record]] = {r.job_kind: r for r in (
    InfoResult, SweepPointResult, PrefillPointResult, KVAllocationResult, GenerateResult,
    TwoClocksResult, ServeRunResult, LoadTestResult, BlockSnapshotsResult, RateSweepResult,
    PrefixCacheResult, SpeculativeResult, Int8PointResult, Int8QualityResult,
    CapacitySearchResult, EndpointLoadTestResult, EndpointRateSweepResult,
    EndpointConcurrencyResult, EndpointStreamResult, SetupResult, ExpertsPointResult,
    TrafficClassesResult, InvarianceResult, DisaggregationResult, ClassRunResult,
    KVFormatsResult)}


def parse_result(kind: str, data: dict) -> Record:
    """The typed record of a job kind's result dict; ResultError if it is malformed."""
    try:
        record = RESULTS[kind]
    except KeyError:
        raise ResultError(f"no result record for job kind {kind!r}") from None
    return record.from_dict(data)

