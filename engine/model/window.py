"""Sliding-window attention for a hybrid model's window layers (ModelConfig.sliding_window).

A query at position p of a window layer attends to positions p - W + 1 .. p (W tokens, itself
included: Mistral 7B, arXiv:2310.06825; Gemma 2, arXiv:2408.00118), read through the sequence's
window_table (block_manager.py), whose blocks before the window have gone back to the pool. The
step's window inputs (slots and block tables in the window table, in the same row order as the
main batch: decode rows, padding rows, prefill chunks) are built here once per step; the layer's
K and V are written there and attention is masked to the window. This torch path gathers each
table's whole width and masks the freed positions out (they point at block 0): the window saves
memory here, not reading time.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ..block_manager import FREED
from ..sequence import Sequence
from .attention import gather_context, paged_decode_torch


@dataclass
class WindowBatch:
    """A step's inputs for the window layers."""

    window: int
    slot_mapping: torch.Tensor  # (T,) each new token's slot in its window table
    decode_block_tables: torch.Tensor | None  # (num_decode, blocks), FREED entries as block 0
    decode_lens: torch.Tensor | None  # (num_decode,) context including the new token
    decode_max_len: int
    prefill_tables: list[torch.Tensor]  # per prefill chunk, (blocks,)


def live(table: list[int]) -> list[int]:
    """A window table with its FREED entries pointing at block 0 (read, then masked out)."""
    return [0 if b == FREED else b for b in table]


def build_window_batch(decode: list[Sequence], prefill: list[tuple[Sequence, int]],
                       block_size: int, device: str, window: int, padding: int = 0,
                       scratch_block: int | None = None) -> WindowBatch:
    """The window layers' slots and tables for a step (before num_computed moves)."""
    slots: list[int] = []
    tables: list[list[int]] = []
    lens: list[int] = []

    def slot(seq: Sequence, pos: int) -> int:
        return seq.window_table[pos // block_size] * block_size + pos % block_size

    for seq in decode:
        slots.append(slot(seq, seq.num_computed))
        tables.append(live(seq.window_table))
        lens.append(seq.num_computed + 1)
    for _ in range(padding):
        slots.append(scratch_block * block_size)
        tables.append([scratch_block])
        lens.append(1)
    prefill_tables = []
    for seq, count in prefill:
        slots.extend(slot(seq, pos) for pos in range(seq.num_computed, seq.num_computed + count))
        prefill_tables.append(torch.tensor(live(seq.window_table), dtype=torch.int64,
                                           device=device))
    decode_tables = decode_lens = None
    if tables:
        width = max(len(t) for t in tables)
        decode_tables = torch.tensor([t + [0] * (width - len(t)) for t in tables],
                                     dtype=torch.int64, device=device)
        decode_lens = torch.tensor(lens, dtype=torch.int64, device=device)
    return WindowBatch(window, torch.tensor(slots, dtype=torch.int64, device=device),
                       decode_tables, decode_lens, max(lens, default=0), prefill_tables)


def window_mask(rows: torch.Tensor, context: int, window: int) -> torch.Tensor:
    """(n, context) True where key position j is in the window of the query at rows[i]:
    rows[i] - window < j <= rows[i]."""
    keys = torch.arange(context, device=rows.device)[None, :]
    return (keys <= rows[:, None]) & (keys > rows[:, None] - window)


def window_attention(cache, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                     batch, wb: WindowBatch) -> torch.Tensor:
    """A window layer's step: write k and v (T, KVH, D) at the window slots, then attention of
    q (T, H, D) masked to the window; returns (T, H * D). `batch` is the step's AttentionBatch
    (its row layout: decode rows first, then the prefill chunks)."""
    cache.write(layer, wb.slot_mapping, k, v)
    k_cache, v_cache = cache.k_layers[layer], cache.v_layers[layer]
    heads, head_dim = q.shape[-2:]
    parts = []
    if batch.num_decode:
        mask = window_mask(wb.decode_lens - 1, wb.decode_max_len, wb.window)
        parts.append(paged_decode_torch(q[: batch.num_decode], k_cache, v_cache,
                                        wb.decode_block_tables, None, wb.decode_max_len,
                                        mask[:, None, None, :]))
    for chunk, table in zip(batch.prefills, wb.prefill_tables, strict=True):
        n, context = chunk.length, chunk.start + chunk.length
        span = slice(chunk.token_offset, chunk.token_offset + n)
        keys = gather_context(k_cache, table[None], context).to(q.dtype)
        values = gather_context(v_cache, table[None], context).to(q.dtype)
        rows = torch.arange(chunk.start, context, device=q.device)
        out = F.scaled_dot_product_attention(q[span].transpose(0, 1)[None], keys, values,
                                             attn_mask=window_mask(rows, context, wb.window),
                                             enable_gqa=True)
        parts.append(out[0].transpose(0, 1))
    out = parts[0] if len(parts) == 1 else torch.cat(parts, dim=0)
    return out.reshape(-1, heads * head_dim)
