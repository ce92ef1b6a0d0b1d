"""Lesson 6's KV formats measured (the kv_formats job, engine.lab.jobs.kv_formats): fp8 against
the float cache, and a hybrid (sliding-window) preset against full attention."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from .record import Record
from .shared import Measured


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
