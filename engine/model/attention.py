"""Attention over the paged KV cache.

A step's tokens arrive flattened: first one token for each decoding sequence, then the chunks of
the sequences in prefill. Decode attention (one query per sequence) goes to the chosen backend:
- `torch`, plain torch: the decoding sequences are put in groups of similar context length, and
  each group's blocks are gathered, padded to the group's longest, into scaled_dot_product_attention.
  Padding every sequence to the batch's longest would make one long prompt beside short ones cost
  batch x longest; grouping keeps the cost near the sum of the lengths (`group_rows`).
- `cpp`: a C++ kernel (csrc/paged_decode.cpp, built once by `python -m engine build-kernel`) that
  reads each sequence's own blocks in place, with no gather and no padding: the CPU default where
  it is built (cpu_kernel.py).
- `triton`: a split-KV kernel that reads the blocks in place (the CUDA path).
Prefill chunks always use torch: their cost is the matrix multiplies, not reading the cache.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from ..errors import ConfigError
from .kv_cache import PagedKVCache

BACKENDS = ("torch", "cpp", "triton")

# Grouping rule of the torch backend: sequences sorted by length join the group of a longer one
# while padding them to its length at most doubles their work, or adds at most GROUP_SLACK
# positions (one more attention call costs about as much as that many padded positions).
GROUP_RATIO = 2
GROUP_SLACK = 64


@dataclass
class PrefillChunk:
    """Tokens [start, start + length) of one sequence, whose context then holds start + length."""

    token_offset: int  # where the chunk's tokens sit in the step's flattened batch
    start: int
    length: int
    block_table: torch.Tensor  # (blocks,) of this sequence


@dataclass
class DecodeGroup:
    """Decode rows attended to in one call, their contexts padded to the group's longest."""

    rows: torch.Tensor | None  # (n,) indices of the group's decode rows; None: all, in order
    block_tables: torch.Tensor  # (n, blocks of the longest)
    max_len: int
    mask: torch.Tensor | None  # (n, 1, 1, max_len) True inside each context; None if all full


@dataclass
class AttentionBatch:
    """Everything attention needs to know about one step, built once per step."""

    slot_mapping: torch.Tensor  # (T,) where each new token's K and V are written
    num_decode: int = 0  # decoding sequences, whose tokens come first in the batch
    decode_block_tables: torch.Tensor | None = None  # (num_decode, max_blocks), padded
    decode_seq_lens: torch.Tensor | None = None  # (num_decode,) context incl. the new token
    decode_max_len: int = 0
    decode_lens: list[int] = field(default_factory=list)  # decode_seq_lens as Python ints
    prefills: list[PrefillChunk] = field(default_factory=list)
    # The torch backend's groups: made on first use in a step (`decode_groups`), then shared by
    # every layer. Callers with static buffers (cuda_graphs) may set them up front.
    groups: list[DecodeGroup] | None = None
    # A hybrid model's window-layer inputs (window.WindowBatch), None without a window
    window: object | None = None

    def decode_groups(self, block_size: int) -> list[DecodeGroup]:
        if self.groups is None:
            self.groups = make_groups(self.decode_lens, self.decode_block_tables, block_size)
        return self.groups


def group_rows(lens: list[int]) -> list[list[int]]:
    """Decode rows in groups of similar length, longest first. Each group pads its rows to its
    first (longest), and a row joins only while that is at most GROUP_RATIO times its own length
    or GROUP_SLACK positions more; so the padded total stays within GROUP_RATIO x sum(lens) +
    GROUP_SLACK x rows, and equal lengths make one group."""
    order = sorted(range(len(lens)), key=lambda row: -lens[row])
    groups: list[list[int]] = []
    for row in order:
        if groups:
            longest = lens[groups[-1][0]]
            if longest <= GROUP_RATIO * lens[row] or longest - lens[row] <= GROUP_SLACK:
                groups[-1].append(row)
                continue
        groups.append([row])
    return groups


def make_groups(lens: list[int], block_tables: torch.Tensor, block_size: int) -> list[DecodeGroup]:
    """The torch backend's decode groups for a step (see group_rows). A single group keeps the
    rows in their own order, so the common case (similar lengths) needs no reordering."""
    rows_of = group_rows(lens)
    if len(rows_of) == 1:
        rows_of = [list(range(len(lens)))]
    groups = []
    for rows in rows_of:
        group_lens = [lens[row] for row in rows]
        max_len = max(group_lens)
        blocks = -(-max_len // block_size)
        if len(rows_of) == 1:
            index, tables = None, block_tables[:, :blocks]
        else:
            index = torch.tensor(rows, dtype=torch.int64, device=block_tables.device)
            tables = block_tables.index_select(0, index)[:, :blocks]
        mask = None
        if min(group_lens) != max_len:
            mask = decode_mask(torch.tensor(group_lens, device=tables.device), max_len)
        groups.append(DecodeGroup(index, tables, max_len, mask))
    return groups


def gather_context(cache_layer: torch.Tensor, block_tables: torch.Tensor, length: int):
    """(B, blocks) block tables -> (B, kv_heads, length, head_dim) view of gathered blocks.
    index_select on flat int64 ids: 4 to 6 times faster on CPU than indexing with the table."""
    batch, blocks = block_tables.shape
    _, block_size, kv_heads, head_dim = cache_layer.shape
    ids = block_tables.reshape(-1)
    if ids.dtype != torch.int64:
        ids = ids.long()
    gathered = cache_layer.index_select(0, ids).view(batch, blocks * block_size, kv_heads,
                                                     head_dim)
    return gathered[:, :length].transpose(1, 2)


def decode_mask(seq_lens: torch.Tensor, max_len: int) -> torch.Tensor:
    """(B, 1, 1, max_len) mask of the positions inside each sequence."""
    positions = torch.arange(max_len, device=seq_lens.device)
    return (positions[None, :] < seq_lens[:, None]).view(len(seq_lens), 1, 1, max_len)


def paged_decode_torch(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                       block_tables: torch.Tensor, seq_lens: torch.Tensor,
                       max_len: int, mask: torch.Tensor | None | str = "compute") -> torch.Tensor:
    """Reference paged decode attention. q (B, H, D); caches (blocks, block_size, KVH, D);
    block_tables (B, max_blocks); seq_lens (B,); mask as from decode_mask (computed here unless
    given). Returns (B, H, D)."""
    batch, heads, head_dim = q.shape
    kv_heads = k_cache.shape[2]
    k = gather_context(k_cache, block_tables, max_len)
    v = gather_context(v_cache, block_tables, max_len)
    # The query heads that share a KV head ride along as that head's "query positions".
    q = q.view(batch, kv_heads, heads // kv_heads, head_dim)
    if isinstance(mask, str):
        mask = None if bool((seq_lens == max_len).all()) else decode_mask(seq_lens, max_len)
    out = F.scaled_dot_product_attention(q, k, v.to(q.dtype), attn_mask=mask)
    return out.reshape(batch, heads, head_dim)


def paged_decode_grouped(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                         groups: list[DecodeGroup]) -> torch.Tensor:
    """The torch backend's decode attention: one padded call per group of similar lengths
    (make_groups), so the work follows the sum of the context lengths. q (B, H, D)."""
    if len(groups) == 1 and groups[0].rows is None:
        group = groups[0]
        return paged_decode_torch(q, k_cache, v_cache, group.block_tables, None, group.max_len,
                                  group.mask)
    out = torch.empty_like(q)
    for group in groups:
        part = paged_decode_torch(q.index_select(0, group.rows), k_cache, v_cache,
                                  group.block_tables, None, group.max_len, group.mask)
        out.index_copy_(0, group.rows, part)
    return out


def prefill_attention(q: torch.Tensor, k_new: torch.Tensor, v_new: torch.Tensor,
                      k_cache: torch.Tensor, v_cache: torch.Tensor,
                      chunk: PrefillChunk) -> torch.Tensor:
    """Causal attention of a chunk's queries (n, H, D) over its sequence's context.

    Tensors go to scaled_dot_product_attention with a batch dimension: on CPU, 3-D inputs take
    the slow reference ("math") kernel, about 8x slower on a 1536-token prompt."""
    n = chunk.length
    q = q.transpose(0, 1)[None]  # (1, H, n, D)
    if chunk.start == 0:  # nothing earlier in the cache: attend to the fresh keys directly
        k = k_new.transpose(0, 1)[None]
        v = v_new.transpose(0, 1)[None]
        out = F.scaled_dot_product_attention(q, k, v.to(q.dtype), is_causal=True,
                                             enable_gqa=True)
    else:
        context = chunk.start + n
        k = gather_context(k_cache, chunk.block_table[None], context).to(q.dtype)
        v = gather_context(v_cache, chunk.block_table[None], context).to(q.dtype)
        rows = torch.arange(n, device=q.device)[:, None] + chunk.start
        mask = torch.arange(context, device=q.device)[None, :] <= rows
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
    return out[0].transpose(0, 1)


class PagedAttention:
    """The `attend` function the model calls in every layer during an engine step.

    With the cpp backend, a step that only decodes takes a shorter road: `fused_qkv` (not None
    then) does a layer's rotary, cache writes and attention in one C++ call from the projected
    q, k and v (the model asks for it, model.DecoderLayer), where plain torch makes a dozen op
    calls, each costing about what the arithmetic does at batch 1. For the same steps
    `decode_inputs()` hands the model what a one-call C++ decode step needs besides its weights
    and its inputs (model.LlamaModel.decode_logits)."""

    def __init__(self, cache: PagedKVCache, backend: str):
        if backend not in BACKENDS:
            raise ValueError(f"unknown attention backend {backend!r}: {', '.join(BACKENDS)}")
        self.cache = cache
        self.backend = backend
        self._batch: AttentionBatch | None = None
        self._decode_step = None  # the C++ one-call decode step (cpp backend)
        self.fused_qkv = None  # set with each step's batch: see the class docstring
        self.decode_inputs = None  # the same steps' inputs for a one-call step (_decode_inputs)
        self._window_attention = None
        if getattr(cache, "window", 0):  # a hybrid model: its window layers go to window.py
            if backend != "torch":
                raise ConfigError(f"sliding-window layers are read by the torch attention "
                                  f"backend only, not {backend}: use --backend torch or auto")
            from .window import window_attention

            self._window_attention = window_attention
        if backend == "cpp":
            from .cpu_kernel import decode_step_kernel, paged_decode_kernel

            if cache.dtype != torch.float32:
                raise ConfigError(f"the cpp attention backend needs a float32 KV cache, not "
                                  f"{str(cache.dtype).removeprefix('torch.')}: use --backend torch")
            self._kernel = paged_decode_kernel()
            if self._kernel is None:
                raise ConfigError("the cpp attention backend's kernel is not built on this "
                                  "machine: run python -m engine build-kernel (about a minute), "
                                  "or use --backend torch")
            self._decode_step = decode_step_kernel()
        elif backend == "triton":
            from .triton_attention import paged_decode_triton

            self._kernel = paged_decode_triton

    @property
    def batch(self) -> AttentionBatch | None:
        return self._batch

    @batch.setter
    def batch(self, batch: AttentionBatch | None) -> None:
        """The step's attention inputs, set by the runner before the model runs."""
        self._batch = batch
        decode_only = batch is not None and batch.num_decode and not batch.prefills
        self.fused_qkv = self._fused_decode if self._decode_step and decode_only else None
        self.decode_inputs = self._decode_inputs if self.fused_qkv else None

    def _decode_inputs(self) -> tuple[torch.Tensor, ...]:
        """What the C++ one-call decode step (model.LlamaModel.decode_logits) needs of a
        decode-only step besides the model's weights and the rows' tokens and positions: slots,
        every layer's K and V caches, block tables, lengths."""
        batch, cache = self._batch, self.cache
        return (batch.slot_mapping, cache.k, cache.v, batch.decode_block_tables,
                batch.decode_seq_lens)

    def _fused_decode(self, layer: int, qkv: torch.Tensor, angles) -> torch.Tensor:
        """A decode-only step's attention for one layer from the fused projection qkv (T, (H +
        2 KVH) * D): rotary on q and k, k and v written at their slots, attention; (T, H * D)."""
        batch, cache = self._batch, self.cache
        kv_heads, head_dim = cache.k.shape[-2:]
        cos, sin = angles
        return self._decode_step(qkv, cos, sin, batch.slot_mapping, cache.k_layers[layer],
                                 cache.v_layers[layer], batch.decode_block_tables,
                                 batch.decode_seq_lens, qkv.shape[1] // head_dim - 2 * kv_heads)

    def decode(self, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
               batch: AttentionBatch) -> torch.Tensor:
        """Attention of the decode rows' queries q (num_decode, H, D) over their contexts."""
        if self.backend == "torch":
            groups = batch.decode_groups(self.cache.block_size)
            return paged_decode_grouped(q, k_cache, v_cache, groups)
        if self.backend == "cpp":
            return self._kernel(q, k_cache, v_cache, batch.decode_block_tables,
                                batch.decode_seq_lens)
        return self._kernel(q, k_cache, v_cache, batch.decode_block_tables,
                            batch.decode_seq_lens, batch.decode_max_len)

    def __call__(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor):
        batch = self.batch
        cache = self.cache
        if batch.window is not None and cache.windowed[layer]:
            return self._window_attention(cache, layer, q, k, v, batch, batch.window)
        cache.write(layer, batch.slot_mapping, k, v)
        k_cache, v_cache = cache.k_layers[layer], cache.v_layers[layer]
        heads, head_dim = q.shape[-2:]
        parts = []
        if batch.num_decode:  # (a decode-only step's q is all decode rows: no slice op)
            q_decode = q[: batch.num_decode] if batch.prefills else q
            parts.append(self.decode(q_decode, k_cache, v_cache, batch))
        for chunk in batch.prefills:
            span = slice(chunk.token_offset, chunk.token_offset + chunk.length)
            parts.append(prefill_attention(q[span], k[span], v[span], k_cache, v_cache, chunk))
        out = parts[0] if len(parts) == 1 else torch.cat(parts, dim=0)
        return out.reshape(-1, heads * head_dim)
