"""Batch-invariant steps: every row of a step computed alone, so its logits do not depend on
who else is in the batch, nor on how its prompt was cut into chunks.

Why a default step is not invariant: a product of many rows by a weight matrix is one library
call whose blocking (and so the order in which each output's sum over K is added up) is chosen
for the row count; decode attention pads each group of rows to its longest context; the C++
one-call decode step lays products out by a plan chosen per row count; and a prompt's prefill
attends over its fresh keys in one call while a later chunk reads them back from the cache.
Floating-point addition is not associative, so each of these choices moves the last bits.

What this mode does instead (`EngineConfig.batch_invariant`): the runner hands the model one
row at a time (`row_by_row_logits`), so every product, norm and activation sees a one-row input
of the same shape whatever the batch, and attention for a token at position p is always the
same call: its query against the p + 1 keys and values read from the paged cache (`OneRow`),
in a prefill chunk and in a decode step alike. The sums run in the same order whatever the
batch and the chunking, so the bits are the same. The C++ one-call decode step is not taken in
this mode (it lays a step's products out by the row count); the rows go through the model's
layer-by-layer path, which keeps its per-op C++ norm and activation where they are built.

The price is batching itself: a step costs about a batch-1 step per row. GPU engines keep their
batches and fix the reduction strategy instead (one tile size and no split-K for every batch,
attention split at fixed KV sizes), which costs far less; this CPU engine has no such kernels.
"""

from __future__ import annotations

import torch

from .attention import AttentionBatch, paged_decode_torch
from .kv_cache import PagedKVCache
from .model import LlamaModel


class OneRow:
    """The `attend` function for a step of one row: its K and V written at its slot, then its
    query against the `length` positions of its context, read from the cache through the first
    blocks of its block table (exactly as many as the context needs, so the call's shapes
    depend on the position alone)."""

    def __init__(self, cache: PagedKVCache, slot: torch.Tensor, table: torch.Tensor, length: int):
        self.cache = cache
        self.slot = slot
        self.length = length
        blocks = -(-length // cache.block_size)
        self.table = table[:blocks].reshape(1, blocks)

    def __call__(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor):
        cache = self.cache
        cache.write(layer, self.slot, k, v)
        out = paged_decode_torch(q, cache.k_layers[layer], cache.v_layers[layer], self.table,
                                 None, self.length, mask=None)
        return out.reshape(1, -1)


def row_contexts(batch: AttentionBatch, rows: int) -> list[tuple[torch.Tensor, int]]:
    """(block table, context length including the row itself) of each of a step's rows: the
    decode rows (padding rows too) first, then each prefill chunk's tokens."""
    contexts: list[tuple[torch.Tensor, int]] = [
        (batch.decode_block_tables[i], batch.decode_lens[i]) for i in range(batch.num_decode)]
    for chunk in batch.prefills:
        contexts += [(chunk.block_table, chunk.start + i + 1) for i in range(chunk.length)]
    assert len(contexts) == rows, "every row of the step has a context"
    return contexts


def row_by_row_logits(model: LlamaModel, cache: PagedKVCache, input_ids: torch.Tensor,
                      positions: torch.Tensor, batch: AttentionBatch,
                      rows: list[int] | None) -> torch.Tensor | None:
    """Logits (float32) at `rows` of a step (every row where None; none where the list is empty,
    for prefill chunks that only fill the cache), each row run through the whole model alone,
    in order, so a chunk's later tokens find the earlier ones' K and V in the cache."""
    wanted = range(input_ids.shape[0]) if rows is None else rows
    keep = set(wanted)
    out: dict[int, torch.Tensor] = {}
    for row, (table, length) in enumerate(row_contexts(batch, input_ids.shape[0])):
        one = slice(row, row + 1)
        attend = OneRow(cache, batch.slot_mapping[one], table, length)
        hidden = model(input_ids[one], positions[one], attend)
        if row in keep:
            out[row] = model.logits(hidden)
    if not out:
        return None
    return torch.cat([out[row] for row in wanted], dim=0)
