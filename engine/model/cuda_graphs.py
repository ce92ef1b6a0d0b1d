"""Decode steps replayed from CUDA graphs.

A decode step of a small model launches hundreds of short kernels; on a GPU the time to launch
them from Python can exceed the time they run. A CUDA graph records the launches once and
replays them with one call. A graph fixes every shape and address, so the step's inputs are
copied into static buffers, the batch is padded up to the nearest captured size, and attention
reads the block table up to the model's full context (the Triton kernel stops at each sequence's
own length). Padding rows write their K and V into a scratch block no sequence owns.

Only the Triton backend can be captured: the torch backend gathers a context whose length
changes every step. Without CUDA, `replay=False` runs the same static-buffer path eagerly, which
is how the padding logic is tested on a CPU.
"""

from __future__ import annotations

import logging

import torch

from .attention import AttentionBatch, DecodeGroup, PagedAttention, decode_mask
from .model import LlamaModel

log = logging.getLogger(__name__)

GRAPH_BATCH_SIZES = (1, 2, 4, 8, 16, 32, 64)


class DecodeGraphs:
    def __init__(self, model: LlamaModel, attention: PagedAttention, scratch_block: int,
                 device: str, replay: bool = True, sizes: tuple[int, ...] = GRAPH_BATCH_SIZES):
        cache = attention.cache
        self.model = model
        self.attention = attention
        self.sizes = sizes
        self.replay = replay
        self.block_size = cache.block_size
        self.max_blocks = -(-model.cfg.context // cache.block_size)
        self.scratch_slot = scratch_block * cache.block_size
        self.scratch_block = scratch_block
        largest = sizes[-1]
        self.input_ids = torch.zeros(largest, dtype=torch.int64, device=device)
        self.positions = torch.zeros(largest, dtype=torch.int64, device=device)
        self.slots = torch.full((largest,), self.scratch_slot, dtype=torch.int64, device=device)
        self.block_tables = torch.full((largest, self.max_blocks), scratch_block,
                                       dtype=torch.int64, device=device)
        self.seq_lens = torch.ones(largest, dtype=torch.int32, device=device)
        self.graphs: dict[int, torch.cuda.CUDAGraph] = {}
        self.outputs: dict[int, torch.Tensor] = {}
        self.pool = None
        self.failed = False

    def size_for(self, batch: int) -> int | None:
        """The smallest captured size that holds batch, or None if it is too large."""
        return next((s for s in self.sizes if s >= batch), None)

    def _forward(self, size: int) -> torch.Tensor:
        max_len = self.max_blocks * self.block_size
        groups = None
        if self.attention.backend == "torch":  # the eager CPU check: one group over the buffers
            mask = decode_mask(self.seq_lens[:size], max_len)
            groups = [DecodeGroup(None, self.block_tables[:size], max_len, mask)]
        self.attention.batch = AttentionBatch(
            slot_mapping=self.slots[:size], num_decode=size,
            decode_block_tables=self.block_tables[:size], decode_seq_lens=self.seq_lens[:size],
            decode_max_len=max_len, groups=groups,
        )
        hidden = self.model(self.input_ids[:size], self.positions[:size], self.attention)
        return self.model.logits(hidden)

    def _fill(self, ids, positions, slots, block_tables, seq_lens, batch: int, size: int) -> None:
        self.input_ids[:batch].copy_(ids)
        self.positions[:batch].copy_(positions)
        self.slots[:batch].copy_(slots)
        self.slots[batch:size].fill_(self.scratch_slot)
        width = block_tables.shape[1]
        self.block_tables[:batch, :width].copy_(block_tables)
        self.block_tables[:batch, width:].fill_(self.scratch_block)
        self.block_tables[batch:size].fill_(self.scratch_block)
        self.seq_lens[:batch].copy_(seq_lens)
        self.seq_lens[batch:size].fill_(1)
        self.positions[batch:size].fill_(0)

    def _capture(self, size: int) -> None:
        self._fill_padding(size)
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(2):  # compiles the Triton kernels and settles the allocator
                self._forward(size)
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self.pool):
            self.outputs[size] = self._forward(size)
        self.pool = graph.pool()
        self.graphs[size] = graph

    def _fill_padding(self, size: int) -> None:
        self.slots[:size].fill_(self.scratch_slot)
        self.block_tables[:size].fill_(self.scratch_block)
        self.seq_lens[:size].fill_(1)
        self.positions[:size].fill_(0)

    def run(self, input_ids: torch.Tensor, positions: torch.Tensor, batch: AttentionBatch):
        """Logits (B, vocab) of a decode-only step, or None when this step cannot use a graph."""
        rows = batch.num_decode
        size = self.size_for(rows)
        if self.failed or size is None or batch.prefills or rows != input_ids.shape[0]:
            return None
        self._fill(input_ids, positions, batch.slot_mapping, batch.decode_block_tables,
                   batch.decode_seq_lens, rows, size)
        if not self.replay:
            return self._forward(size)[:rows]
        if size not in self.graphs:
            try:
                self._capture(size)
            except Exception as error:  # a driver or kernel that cannot be captured: run eagerly
                log.warning("CUDA graph capture failed (%s); decoding without graphs", error)
                self.failed = True
                return None
            self._fill(input_ids, positions, batch.slot_mapping, batch.decode_block_tables,
                       batch.decode_seq_lens, rows, size)
        self.graphs[size].replay()
        return self.outputs[size][:rows].clone()  # the next replay overwrites the static output
