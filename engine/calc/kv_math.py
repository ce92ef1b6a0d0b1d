"""KV cache sizes from a model's shape, and how many sequences a memory budget holds.

Pure Python (no torch), so the web process can run the calculator as the reader types:

    KV bytes per token = 2 (K and V) x layers x KV heads x head dim x bytes per element

A paged cache (fixed-size blocks, a block table per sequence) holds each sequence's tokens
rounded up to whole blocks; a contiguous cache reserves the whole context for every sequence
up front, because it cannot grow a sequence's slab in place. `fit` compares the two.
`cache_checks` holds the formula against the caches the engine really allocated, and
`reused_blocks` counts the blocks a run's requests took in turn.

The public shapes are the numbers each model's published configuration gives (layers, query
heads, KV heads, head dim = hidden size / query heads, context length); they are quoted, not
measured here.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the records are read by their fields only
    from ..lab.results import BlockSnapshot, KVCacheRow

# Bytes per stored number, by the names the pages use. fp8 is the 8-bit float format (e4m3 or
# e5m2) that serving engines offer for the KV cache.
BYTES_PER_ELEMENT: dict[str, int] = {"fp32": 4, "fp16": 2, "bf16": 2, "fp8": 1}

# torch dtype names (what the engine's `info` reports) to the names above
DTYPE_ALIASES = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16",
                 "float8_e4m3fn": "fp8", "float8_e5m2": "fp8"}

DEFAULT_BLOCK_SIZE = 16  # tokens per block, the engine's default (and vLLM's)


def element_bytes(dtype: str) -> int:
    """Bytes per element of a dtype name ("fp16", "float32", ...); ValueError if unknown."""
    name = DTYPE_ALIASES.get(dtype, dtype)
    try:
        return BYTES_PER_ELEMENT[name]
    except KeyError:
        raise ValueError(f"unknown dtype {dtype!r}: choose one of "
                         f"{', '.join(BYTES_PER_ELEMENT)}") from None


def kv_bytes(layers: int, kv_heads: int, head_dim: int, element_size: int) -> int:
    """KV bytes per token: 2 (K and V) x layers x KV heads x head dim x bytes per element."""
    return 2 * layers * kv_heads * head_dim * element_size


def kv_bytes_per_token(layers: int, kv_heads: int, head_dim: int, dtype: str) -> int:
    """KV bytes per token for a dtype name (see kv_bytes)."""
    return kv_bytes(layers, kv_heads, head_dim, element_bytes(dtype))


@dataclass(frozen=True)
class KVShape:
    """The parts of a model's shape that size its KV cache."""

    name: str
    layers: int
    heads: int  # query heads
    kv_heads: int
    head_dim: int
    context: int  # the longest sequence the model takes
    source: str = ""  # where the numbers come from
    note: str = ""

    @property
    def attention_kind(self) -> str:
        """MHA (every query head has its own K and V), GQA (groups share), MQA (one for all)."""
        if self.kv_heads == self.heads:
            return "MHA"
        return "MQA" if self.kv_heads == 1 else f"GQA ({self.heads // self.kv_heads} query heads per KV head)"

    def bytes_per_token(self, dtype: str) -> int:
        return kv_bytes_per_token(self.layers, self.kv_heads, self.head_dim, dtype)

    def bytes_per_sequence(self, tokens: int, dtype: str) -> int:
        return tokens * self.bytes_per_token(dtype)


PUBLIC_SHAPES: tuple[KVShape, ...] = (
    KVShape("Llama-2-7B", layers=32, heads=32, kv_heads=32, head_dim=128, context=4096,
            source="its published config.json (meta-llama/Llama-2-7b-hf on Hugging Face)",
            note="every query head keeps its own keys and values"),
    KVShape("Llama-3-8B", layers=32, heads=32, kv_heads=8, head_dim=128, context=8192,
            source="its published config.json (meta-llama/Meta-Llama-3-8B on Hugging Face)",
            note="grouped-query attention: 4 query heads share each KV head"),
    KVShape("Llama-2-70B", layers=80, heads=64, kv_heads=8, head_dim=128, context=4096,
            source="its published config.json (meta-llama/Llama-2-70b-hf on Hugging Face)",
            note="grouped-query attention: 8 query heads share each KV head"),
)


def shape_from_preset(preset: dict) -> KVShape:
    """A KVShape from one preset of the engine's `info` result."""
    return KVShape(preset["name"], layers=int(preset["layers"]), heads=int(preset["heads"]),
                   kv_heads=int(preset["kv_heads"]), head_dim=int(preset["head_dim"]),
                   context=int(preset["context"]), source="this engine's preset")


def blocks_for(tokens: int, block_size: int) -> int:
    return -(-tokens // block_size)


@dataclass(frozen=True)
class Fit:
    """How many sequences of a given length fit a KV budget, reserved two ways."""

    budget_bytes: float
    bytes_per_token: int
    tokens_per_sequence: int  # what a sequence really holds (prompt + output)
    reserved_tokens: int  # what a contiguous cache reserves per sequence (the full context)
    block_size: int
    contiguous: int  # sequences that fit with the full context reserved for each
    paged: int  # sequences that fit holding whole blocks of what they use

    @property
    def contiguous_bytes_each(self) -> int:
        return self.reserved_tokens * self.bytes_per_token

    @property
    def paged_bytes_each(self) -> int:
        return blocks_for(self.tokens_per_sequence, self.block_size) * self.block_size \
            * self.bytes_per_token

    @property
    def contiguous_waste(self) -> float:
        """Share of a contiguous reservation that holds nothing."""
        return 1 - self.tokens_per_sequence / self.reserved_tokens

    @property
    def paged_waste(self) -> float:
        """Share of a paged sequence's blocks that holds nothing (only its last block's tail)."""
        return 1 - self.tokens_per_sequence * self.bytes_per_token / self.paged_bytes_each

    @property
    def gain(self) -> float | None:
        return None if self.contiguous == 0 else self.paged / self.contiguous


def fit(budget_bytes: float, bytes_per_token: int, tokens_per_sequence: int,
        reserved_tokens: int, block_size: int = DEFAULT_BLOCK_SIZE) -> Fit:
    """Sequences that fit a budget: contiguous reserves `reserved_tokens` each, paged holds
    `tokens_per_sequence` rounded up to whole blocks. ValueError names a bad input."""
    if not budget_bytes > 0:
        raise ValueError("the memory budget must be more than 0")
    if bytes_per_token < 1:
        raise ValueError("bytes per token must be at least 1")
    if block_size < 1:
        raise ValueError("the block size must be at least 1 token")
    if tokens_per_sequence < 1:
        raise ValueError("a sequence holds at least 1 token")
    if reserved_tokens < tokens_per_sequence:
        raise ValueError(f"a sequence of {tokens_per_sequence} tokens does not fit the context "
                         f"of {reserved_tokens} tokens")
    contiguous = int(budget_bytes // (reserved_tokens * bytes_per_token))
    paged_each = blocks_for(tokens_per_sequence, block_size) * block_size * bytes_per_token
    return Fit(budget_bytes, bytes_per_token, tokens_per_sequence, reserved_tokens, block_size,
               contiguous=contiguous, paged=int(budget_bytes // paged_each))


def format_bytes(n: float) -> str:
    """Binary units, three significant figures: 524288 -> '512 KiB'."""
    units = ("bytes", "KiB", "MiB", "GiB", "TiB")
    value = float(n)
    unit = 0
    while abs(value) >= 1024 and unit < len(units) - 1:
        value /= 1024
        unit += 1
    if unit == 0:
        return f"{int(value):,} bytes"
    text = f"{value:.3g}" if value < 1000 else f"{value:,.0f}"
    return f"{text} {units[unit]}"


@dataclass(frozen=True)
class CacheCheck:
    """One cache the engine allocated, against the formula: bytes per token both ways."""

    row: KVCacheRow
    formula: int  # 2 x layers x KV heads x head dim x bytes per element
    measured: float  # allocated bytes / tokens of capacity

    @property
    def agrees(self) -> bool:
        return self.measured == self.formula


def cache_checks(rows: Iterable[KVCacheRow]) -> list[CacheCheck]:
    """Each cache the engine allocated (the `kv_allocation` job), with the formula's bytes per
    token beside what it really took."""
    return [CacheCheck(row, kv_bytes(row.layers, row.kv_heads, row.head_dim, row.element_bytes),
                       row.allocated_bytes / row.capacity_tokens)
            for row in rows]


def reused_blocks(snapshots: Iterable[BlockSnapshot]) -> int:
    """How many physical blocks held more than one sequence over a run: a block one request
    freed and a later one took."""
    owners: dict[int, set[int]] = {}
    for snap in snapshots:
        for seq in snap.seqs:
            for block in seq.blocks:
                owners.setdefault(block, set()).add(seq.id)
    return sum(1 for ids in owners.values() if len(ids) > 1)


def busiest_step(snapshots: Sequence[BlockSnapshot]) -> int:
    """The index of the step with the most live sequences (then the most blocks in use)."""
    if not snapshots:
        raise ValueError("a run without steps has no busiest step")
    def load(i: int) -> tuple[int, int]:
        seqs = snapshots[i].seqs
        return len(seqs), sum(len(s.blocks) for s in seqs)

    return max(range(len(snapshots)), key=load)
