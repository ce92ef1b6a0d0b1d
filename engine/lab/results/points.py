"""The results of jobs that measure one point or one fact of this machine: its limits (info), a
decode or prefill point, the set-up, the KV allocation, the int8 and expert points, the int8
quality check and the batch-invariance runs."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar

from .record import Record
from .shared import Measured, PresetShape


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
