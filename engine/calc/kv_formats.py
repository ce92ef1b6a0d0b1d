"""What a KV format and a hybrid-attention layout hold, pure Python (no torch), for the pages.

FP8 KV (the engine's `--kv-dtype fp8`, engine/model/fp8_kv.py): one byte per element plus a
float32 scale per block, layer and KV head, for K and for V:

    fp8 bytes per token = 2 x layers x KV heads x head dim x 1 + 2 x layers x KV heads x 4 / B

Hybrid attention (ModelConfig.sliding_window): the full layers keep every token, the window
layers the last W (engine/block_manager.py). While decoding, a sequence of L tokens holds

    full blocks = ceil(L / B),  window blocks <= min(ceil(L / B), ceil(W / B) + 1)

and each block holds the K and V of half the layers (the two groups are equally large).

The GPU figures are quoted from NVIDIA's datasheets, named beside each.
"""

from __future__ import annotations

from dataclasses import dataclass

from .gpu_scaling import H100, LLAMA_3_8B, Machine, ModelShape
from .kv_math import kv_bytes

SCALE_BYTES = 4  # a float32 scale


def blocks_for(tokens: int, block_size: int) -> int:
    return -(-tokens // block_size)


def fp8_bytes_per_block(layers: int, kv_heads: int, head_dim: int, block_size: int) -> int:
    """An fp8 block's bytes: its elements and its scales (module docstring)."""
    return kv_bytes(layers, kv_heads, head_dim, 1) * block_size + 2 * layers * kv_heads * SCALE_BYTES


def hybrid_blocks(tokens: int, block_size: int, window: int) -> tuple[int, int]:
    """(full blocks, the most window blocks) a decoding sequence of `tokens` tokens holds."""
    full = blocks_for(tokens, block_size)
    return full, min(full, blocks_for(window, block_size) + 1)


def hybrid_bytes_per_token(tokens: int, layers: int, kv_heads: int, head_dim: int,
                           element_bytes: int, block_size: int, window: int) -> float:
    """A hybrid model's KV bytes per token of context at `tokens` tokens: its blocks (both
    groups, half the layers each) over its length. Without the window it would be
    kv_bytes(layers, ...) whatever the length."""
    full, windowed = hybrid_blocks(tokens, block_size, window)
    block = kv_bytes(layers // 2, kv_heads, head_dim, element_bytes) * block_size
    return (full + windowed) * block / tokens


# NVIDIA H200 SXM: the H100's compute with more and faster memory.
H200 = Machine(
    "NVIDIA H200 SXM", bandwidth_gbs=4800.0, peak_gflops=989_500.0, memory_gb=141.0,
    source="NVIDIA H200 Tensor Core GPU datasheet: 141 GB HBM3e at 4.8 TB/s; BF16 Tensor Core "
           "1,979 TFLOPS with sparsity, half that dense")
KV_GPUS: tuple[Machine, ...] = (H100, H200)


@dataclass(frozen=True)
class GpuKVRow:
    """One GPU serving a model: memory left for the KV cache and what it holds in each format."""

    machine: Machine
    free_bytes: float  # memory beside the bf16 weights
    bf16_tokens: int
    fp8_tokens: int
    bf16_sequences: int  # of `context` tokens
    fp8_sequences: int


def gpu_kv_row(machine: Machine, context: int, model: ModelShape = LLAMA_3_8B) -> GpuKVRow:
    """Tokens and sequences of `context` tokens whose KV fits beside the model's bf16 weights,
    in bf16 (2 bytes per element) and fp8 (1 byte; scales left out, under 1% at head dim 128
    and 16-token blocks), all of the memory given to weights and KV (a ceiling: activations
    and the runtime take some)."""
    free = max(0.0, machine.memory_gb * 1e9 - model.weight_bytes)
    bf16 = model.kv_bytes_per_token
    fp8 = bf16 // 2
    return GpuKVRow(machine, free, int(free // bf16), int(free // fp8),
                    int(free // (bf16 * context)), int(free // (fp8 * context)))


def requests_that_fit(budget_bytes: float, tokens: int, layers: int, kv_heads: int,
                      head_dim: int, element_bytes: int, block_size: int, window: int = 0) -> int:
    """Sequences of `tokens` tokens (decoding) whose blocks fit a budget: a full model's blocks
    hold every layer; a hybrid model's (window > 0) hold half the layers, ceil(L / B) of them for
    the full layers and hybrid_blocks' window blocks beside them."""
    if not window:
        block = kv_bytes(layers, kv_heads, head_dim, element_bytes) * block_size
        return int(budget_bytes // (blocks_for(tokens, block_size) * block))
    block = kv_bytes(layers // 2, kv_heads, head_dim, element_bytes) * block_size
    return int(budget_bytes // (sum(hybrid_blocks(tokens, block_size, window)) * block))
