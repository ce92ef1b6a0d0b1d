"""The KV handover: a finished prefill's cache blocks (every layer, keys and values) copied out of
the prefill worker's paged pool into shared memory, and copied into blocks of the decode
worker's own pool, with the request's state (its tokens so far, how many are computed).

One copy each way: export_kv gathers the sequence's blocks straight into a tensor in shared
memory (torch's file-descriptor sharing sends only a handle through a queue, never the bytes);
import_kv allocates blocks in the decode engine's pool and scatters the rows into them. The block
ids differ between the two pools, so the decode side maps the copy into its own block table.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..errors import ConfigError
from ..llm_engine import LLMEngine
from ..sequence import Sequence


@dataclass
class Handover:
    """What the prefill worker hands the decode worker for one request. k and v hold the
    sequence's blocks in block-table order: (layers, blocks, block_size, kv_heads, head_dim).
    Times are seconds from the run's start: prefill_start_s when its prefill step began,
    first_token_s when it ended (the first token), sent_s when the copy was in shared memory."""

    request_id: int
    prompt_ids: list[int]
    output_ids: list[int]
    max_new_tokens: int
    num_computed: int
    ignore_eos: bool
    k: torch.Tensor
    v: torch.Tensor
    arrival_s: float = 0.0
    prefill_start_s: float = 0.0
    first_token_s: float = 0.0
    sent_s: float = 0.0

    @property
    def nbytes(self) -> int:
        return self.k.numel() * self.k.element_size() * 2


def export_kv(engine: LLMEngine, seq: Sequence, shared: bool = True) -> tuple[torch.Tensor,
                                                                             torch.Tensor]:
    """Copies of seq's KV blocks (all layers) in block-table order, in shared memory unless
    shared is False. The last block is copied whole: its unused slots are never read."""
    cache = engine.cache
    index = torch.tensor(seq.block_table, dtype=torch.int64, device=cache.k.device)
    shape = (cache.k.shape[0], len(seq.block_table), *cache.k.shape[2:])
    out = []
    for pool in (cache.k, cache.v):
        copy = torch.empty(shape, dtype=pool.dtype, device="cpu")
        if shared:
            copy.share_memory_()
        if pool.device.type == "cpu":
            torch.index_select(pool, 1, index, out=copy)
        else:
            copy.copy_(pool.index_select(1, index))
        out.append(copy)
    return out[0], out[1]


def make_handover(engine: LLMEngine, seq: Sequence, shared: bool = True) -> Handover:
    """seq's state and a copy of its KV, ready to hand over (its blocks are still the caller's
    to release)."""
    k, v = export_kv(engine, seq, shared)
    return Handover(request_id=seq.id, prompt_ids=list(seq.prompt_ids),
                    output_ids=list(seq.output_ids), max_new_tokens=seq.max_new_tokens,
                    num_computed=seq.num_computed, ignore_eos=seq.ignore_eos, k=k, v=v)


def import_kv(engine: LLMEngine, handover: Handover) -> Sequence:
    """A sequence in engine holding the handed-over KV in blocks of its own pool, ready to
    decode its next token. Raises ConfigError, naming the limit, where the pool is short."""
    seq = engine.new_sequence(handover.prompt_ids, handover.max_new_tokens,
                              ignore_eos=handover.ignore_eos, seq_id=handover.request_id)
    seq.output_ids = list(handover.output_ids)
    seq.finished = engine.is_finished(seq)
    blocks = handover.k.shape[1]
    if blocks * engine.cache.block_size < handover.num_computed:
        raise ConfigError(f"request {seq.id}: {blocks} blocks cannot hold "
                          f"{handover.num_computed} computed tokens")
    if handover.k.shape[2] != engine.cache.block_size:
        raise ConfigError(f"the prefill worker's blocks hold {handover.k.shape[2]} tokens, the "
                          f"decode worker's {engine.cache.block_size}: use one block size")
    if not engine.reserve(seq, handover.num_computed):
        raise ConfigError(f"request {seq.id}: the decode worker's KV pool has "
                          f"{engine.blocks.num_free} free blocks, {blocks} needed: raise "
                          f"--kv-budget-mib")
    cache = engine.cache
    index = torch.tensor(seq.block_table, dtype=torch.int64, device=cache.k.device)
    cache.k.index_copy_(1, index, handover.k.to(cache.k.device))
    cache.v.index_copy_(1, index, handover.v.to(cache.v.device))
    seq.num_computed = handover.num_computed
    return seq
