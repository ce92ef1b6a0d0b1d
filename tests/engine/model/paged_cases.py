"""Random paged-attention inputs shared by the decode-attention tests of every backend."""

from __future__ import annotations

import torch


def make_case(lens, heads, kv_heads, head_dim, dtype, block_size=16, seed=0, spare_blocks=3,
              device="cpu"):
    """Random q and caches, block tables drawn from a shuffled pool, zero-padded like the
    runner's. Returns (q, k_cache, v_cache, block_tables, seq_lens, max_len)."""
    gen = torch.Generator().manual_seed(seed)
    counts = [-(-n // block_size) for n in lens]
    num_blocks = sum(counts) + spare_blocks
    perm = torch.randperm(num_blocks, generator=gen)
    tables = torch.zeros(len(lens), max(counts), dtype=torch.int32)
    used = 0
    for row, count in enumerate(counts):
        tables[row, :count] = perm[used: used + count]
        used += count
    shape = (num_blocks, block_size, kv_heads, head_dim)
    k_cache = torch.randn(shape, generator=gen).to(device, dtype)
    v_cache = torch.randn(shape, generator=gen).to(device, dtype)
    q = torch.randn(len(lens), heads, head_dim, generator=gen).to(device, dtype)
    seq_lens = torch.tensor(lens, dtype=torch.int32, device=device)
    return q, k_cache, v_cache, tables.to(device), seq_lens, max(lens)


def poisoned(case, spare_block: int | None = None):
    """The case with NaN everywhere a sequence's own context does not reach: in the tail of its
    last block and in a spare block that every padding entry of the block tables points to.
    A kernel that reads only each sequence's own length gives the clean case's output."""
    q, k_cache, v_cache, tables, seq_lens, max_len = case
    block_size = k_cache.shape[1]
    used = {int(b) for row, n in zip(tables, seq_lens.tolist())
            for b in row[: -(-n // block_size)]}
    spare = spare_block if spare_block is not None else next(
        b for b in range(k_cache.shape[0]) if b not in used)
    k_bad, v_bad, tables_bad = k_cache.clone(), v_cache.clone(), tables.clone()
    for row, n in enumerate(seq_lens.tolist()):
        blocks = -(-n // block_size)
        last = int(tables[row, blocks - 1])
        k_bad[last, n - (blocks - 1) * block_size:] = float("nan")
        v_bad[last, n - (blocks - 1) * block_size:] = float("nan")
        tables_bad[row, blocks:] = spare
    k_bad[spare] = float("nan")
    v_bad[spare] = float("nan")
    return q, k_bad, v_bad, tables_bad, seq_lens, max_len


# (lens, heads, kv_heads, head_dim): length 1, block edges, multi-head, groups of 3, multi-query,
# large head dim, ragged batches, one long context beside short ones
CASES = {
    "len1": ([1], 8, 2, 32),
    "block_edges_a": ([15, 16, 17], 8, 2, 32),
    "block_edges_b": ([31, 32, 33], 8, 2, 32),
    "mha": ([33, 5], 4, 4, 32),
    "group3": ([17, 40], 6, 2, 32),
    "mqa_d64": ([20], 4, 1, 64),
    "d128": ([18], 2, 1, 128),
    "ragged": ([1, 16, 47, 100], 8, 2, 32),
    "one_long": ([300, 7, 20, 9, 16], 12, 4, 64),
}
