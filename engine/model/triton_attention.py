"""Paged decode attention as a split-KV ("flash-decoding") Triton kernel.

Decode runs one query token per sequence against a long context. A kernel with one program per
(sequence, head) launches only B x H programs: with a small batch that is a few dozen programs
for a GPU with over a hundred multiprocessors, each walking the whole context alone, so most of
the chip sits idle while memory bandwidth (the real limit in decode) goes unused. Split-KV also
cuts the context into splits and gives each split its own program, so even batch 1 fills the GPU.

Stage 1, grid (batch, kv_head, split): a program takes the G = H / KVH query heads that share its
KV head (padded to a power of two with masks) and walks the blocks of its split, looking each
block up in the block table to find the physical block, so every K and V block is read once per
group rather than once per query head. It keeps an online softmax in fp32 (running max m, running
sum l, unnormalised weighted sum of V) and writes those partials. A split that lies past a
sequence's end runs no iteration and writes m = -inf, l = 0, acc = 0.

Stage 2, grid (batch, head): merges the splits with a log-sum-exp: M = max m_s, and
out = sum_s 2^(m_s - M) acc_s / sum_s 2^(m_s - M) l_s; empty splits weigh exactly 0.

Scores are kept in base 2 (q is pre-scaled by log2(e) / sqrt(D)) so the kernel uses exp2.
Nothing here reads a tensor back to the host: the grid depends only on shapes and `max_len`, so
the call can be captured in a CUDA graph.
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

LOG2E = 1.4426950408889634

# Splitting rule: aim for this many stage-1 programs in all (a couple of waves on a large GPU),
# give each split at least MIN_BLOCKS_PER_SPLIT blocks (a program needs some work to hide
# latency and amortise the merge), and never more than MAX_SPLITS splits.
TARGET_PROGRAMS = 256
MIN_BLOCKS_PER_SPLIT = 2
MAX_SPLITS = 32


def choose_splits(batch: int, kv_heads: int, max_len: int, block_size: int) -> tuple[int, int]:
    """(num_splits, blocks_per_split) for a decode step; plain integer arithmetic on shapes and
    max_len, so the same step shape always gets the same grid. Every split but possibly the
    last holds blocks_per_split blocks of the longest sequence; none is empty for it."""
    num_blocks = max(1, -(-max_len // block_size))
    wanted = -(-TARGET_PROGRAMS // max(1, batch * kv_heads))
    splits = max(1, min(wanted, MAX_SPLITS, -(-num_blocks // MIN_BLOCKS_PER_SPLIT)))
    blocks_per_split = -(-num_blocks // splits)
    return -(-num_blocks // blocks_per_split), blocks_per_split


def split_kernel_warps(group_pad: int, block_size: int, head_dim: int) -> int:
    """Warps for stage 1: the scores and P @ V are broadcast products of group x block x dim
    elements; about 32 of them per thread keeps a program near 128 registers without spilling
    (checked with ptxas for sm_90), so larger tiles get more warps, 4 to 16."""
    elements = group_pad * block_size * head_dim
    return min(16, max(4, triton.next_power_of_2(elements // 1024)))


@triton.jit
def _decode_split_kernel(
    q_ptr, k_ptr, v_ptr, block_tables_ptr, seq_lens_ptr,
    acc_ptr, m_ptr, l_ptr,
    qk_scale, blocks_per_split,
    stride_qb, stride_qh, stride_qd,
    stride_kb, stride_kt, stride_kh, stride_kd,
    stride_vb, stride_vt, stride_vh, stride_vd,
    stride_bt_b, stride_bt_n,
    stride_ab, stride_ah, stride_as, stride_ad,
    stride_mb, stride_mh, stride_ms,
    GROUP: tl.constexpr, GROUP_PAD: tl.constexpr, HEAD_DIM: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
):
    seq = tl.program_id(0)
    kv_head = tl.program_id(1)
    split = tl.program_id(2)

    g = tl.arange(0, GROUP_PAD)
    d = tl.arange(0, HEAD_DIM)
    t = tl.arange(0, BLOCK_SIZE)
    g_mask = g < GROUP
    heads = kv_head * GROUP + g  # the query heads this program serves

    q = tl.load(
        q_ptr + seq * stride_qb + heads[:, None] * stride_qh + d[None, :] * stride_qd,
        mask=g_mask[:, None], other=0.0,
    ).to(tl.float32) * qk_scale  # (GROUP_PAD, HEAD_DIM), base-2 scaled

    seq_len = tl.load(seq_lens_ptr + seq)
    first = split * blocks_per_split
    last = tl.minimum(first + blocks_per_split, tl.cdiv(seq_len, BLOCK_SIZE))

    m_i = tl.full([GROUP_PAD], float("-inf"), tl.float32)
    l_i = tl.zeros([GROUP_PAD], tl.float32)
    acc = tl.zeros([GROUP_PAD, HEAD_DIM], tl.float32)

    for blk in range(first, last):  # empty when the split starts past this sequence's end
        phys = tl.load(block_tables_ptr + seq * stride_bt_b + blk * stride_bt_n).to(tl.int64)
        pos = blk * BLOCK_SIZE + t
        valid = pos < seq_len  # every iteration has at least one valid position
        k = tl.load(
            k_ptr + phys * stride_kb + t[:, None] * stride_kt + kv_head * stride_kh
            + d[None, :] * stride_kd,
            mask=valid[:, None], other=0.0,
        ).to(tl.float32)  # (BLOCK_SIZE, HEAD_DIM)
        v = tl.load(
            v_ptr + phys * stride_vb + t[:, None] * stride_vt + kv_head * stride_vh
            + d[None, :] * stride_vd,
            mask=valid[:, None], other=0.0,
        ).to(tl.float32)
        s = tl.sum(q[:, None, :] * k[None, :, :], axis=2)  # (GROUP_PAD, BLOCK_SIZE)
        s = tl.where(valid[None, :], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))  # finite: the block has a valid position
        alpha = tl.exp2(m_i - m_new)  # 0 on the first block (m_i = -inf)
        p = tl.exp2(s - m_new[:, None])  # 0 at masked positions
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.sum(p[:, :, None] * v[None, :, :], axis=1)
        m_i = m_new

    tl.store(
        acc_ptr + seq * stride_ab + heads[:, None] * stride_ah + split * stride_as
        + d[None, :] * stride_ad,
        acc, mask=g_mask[:, None],
    )
    stat = seq * stride_mb + heads * stride_mh + split * stride_ms
    tl.store(m_ptr + stat, m_i, mask=g_mask)
    tl.store(l_ptr + stat, l_i, mask=g_mask)


@triton.jit
def _decode_merge_kernel(
    acc_ptr, m_ptr, l_ptr, out_ptr, num_splits,
    stride_ab, stride_ah, stride_as, stride_ad,
    stride_mb, stride_mh, stride_ms,
    stride_ob, stride_oh, stride_od,
    SPLITS_PAD: tl.constexpr, HEAD_DIM: tl.constexpr,
):
    seq = tl.program_id(0)
    head = tl.program_id(1)
    s = tl.arange(0, SPLITS_PAD)
    d = tl.arange(0, HEAD_DIM)
    s_mask = s < num_splits

    stat = seq * stride_mb + head * stride_mh + s * stride_ms
    m = tl.load(m_ptr + stat, mask=s_mask, other=float("-inf"))
    l_s = tl.load(l_ptr + stat, mask=s_mask, other=0.0)
    acc = tl.load(
        acc_ptr + seq * stride_ab + head * stride_ah + s[:, None] * stride_as
        + d[None, :] * stride_ad,
        mask=s_mask[:, None], other=0.0,
    )
    m_max = tl.max(m, axis=0)
    m_max = tl.where(m_max == float("-inf"), 0.0, m_max)  # only for an empty sequence
    w = tl.exp2(m - m_max)  # 0 for empty splits
    denom = tl.sum(w * l_s, axis=0)
    denom = tl.where(denom == 0.0, 1.0, denom)  # empty sequence: output 0, not NaN
    out = tl.sum(w[:, None] * acc, axis=0) / denom
    tl.store(out_ptr + seq * stride_ob + head * stride_oh + d * stride_od,
             out.to(out_ptr.dtype.element_ty))


def _paged_decode(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                  block_tables: torch.Tensor, seq_lens: torch.Tensor,
                  num_splits: int, blocks_per_split: int) -> torch.Tensor:
    """The two launches with an explicit split layout (tests force layouts through this)."""
    batch, heads, head_dim = q.shape
    _, block_size, kv_heads, _ = k_cache.shape
    if heads % kv_heads:
        raise ValueError(f"{heads} query heads do not group over {kv_heads} KV heads")
    if head_dim & (head_dim - 1) or block_size & (block_size - 1):
        raise ValueError("head_dim and block_size must be powers of two")
    group = heads // kv_heads
    group_pad = triton.next_power_of_2(group)
    out = torch.empty((batch, heads, head_dim), dtype=q.dtype, device=q.device)
    if batch == 0:
        return out
    acc = torch.empty((batch, heads, num_splits, head_dim), dtype=torch.float32, device=q.device)
    m = torch.empty((batch, heads, num_splits), dtype=torch.float32, device=q.device)
    l_sum = torch.empty_like(m)

    _decode_split_kernel[(batch, kv_heads, num_splits)](
        q, k_cache, v_cache, block_tables, seq_lens,
        acc, m, l_sum,
        LOG2E / math.sqrt(head_dim), blocks_per_split,
        *q.stride(), *k_cache.stride(), *v_cache.stride(), *block_tables.stride(),
        *acc.stride(), *m.stride(),
        GROUP=group, GROUP_PAD=group_pad, HEAD_DIM=head_dim,
        BLOCK_SIZE=block_size,
        num_warps=split_kernel_warps(group_pad, block_size, head_dim),
    )
    _decode_merge_kernel[(batch, heads)](
        acc, m, l_sum, out, num_splits,
        *acc.stride(), *m.stride(), *out.stride(),
        SPLITS_PAD=triton.next_power_of_2(num_splits), HEAD_DIM=head_dim,
    )
    return out


def paged_decode_triton(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                        block_tables: torch.Tensor, seq_lens: torch.Tensor,
                        max_len: int) -> torch.Tensor:
    """Paged decode attention, same contract as attention.paged_decode_torch: q (B, H, D);
    caches (blocks, block_size, KVH, D); block_tables (B, max_blocks) int32 or int64, padded;
    seq_lens (B,) int32; max_len = max(seq_lens) as a Python int. Returns (B, H, D) in q's
    dtype."""
    num_splits, blocks_per_split = choose_splits(
        q.shape[0], k_cache.shape[2], max_len, k_cache.shape[1])
    return _paged_decode(q, k_cache, v_cache, block_tables, seq_lens,
                         num_splits, blocks_per_split)
