"""The KV cache lesson's arithmetic on the engine's records (engine.calc.kv_math): the formula
held against an allocated cache, and the blocks a run's requests took in turn."""

from __future__ import annotations

import pytest

from engine.calc.kv_math import busiest_step, cache_checks, reused_blocks
from engine.lab.results import BlockSnapshot, KVCacheRow, SnapshotSeq


def cache(allocated_bytes: int, capacity_tokens: int = 1024) -> KVCacheRow:
    """tiny's shape in float32: 2 x 6 layers x 2 KV heads x 32 x 4 bytes = 3,072 per token."""
    return KVCacheRow(preset="tiny", dtype="float32", engine_dtype=True, element_bytes=4,
                      layers=6, kv_heads=2, head_dim=32, num_blocks=64, block_size=16,
                      capacity_tokens=capacity_tokens, allocated_bytes=allocated_bytes,
                      bytes_per_token=allocated_bytes // capacity_tokens,
                      tensor_shape=[2, 6, 64, 16, 2, 32])


def step(step_index: int, *seqs: tuple[int, list[int]]) -> BlockSnapshot:
    return BlockSnapshot(seqs=[SnapshotSeq(id=i, blocks=b, tokens=16 * len(b), phase="decode")
                               for i, b in seqs],
                         free=0, step=step_index, t_s=0.01 * step_index, finished=[])


def test_a_cache_of_the_formulas_size_agrees_and_one_a_block_larger_differs():
    good, bad = cache_checks([cache(3072 * 1024), cache(3072 * 1024 + 64)])
    assert (good.formula, good.measured, good.agrees) == (3072, 3072.0, True)
    assert bad.formula == 3072 and bad.measured == pytest.approx(3072.0625) and not bad.agrees
    assert cache_checks([]) == []


def test_reused_blocks_count_blocks_held_by_two_requests_in_turn():
    run = [step(0, (1, [0, 1]), (2, [2])),
           step(1, (1, [0, 1, 3])),            # request 2 finished: block 2 is free
           step(2, (1, [0, 1, 3]), (3, [2])),  # request 3 takes block 2
           step(3, (4, [0, 5]))]               # request 4 takes block 0 from request 1
    assert reused_blocks(run) == 2
    assert reused_blocks(run[:2]) == 0  # one owner each: a sequence growing is no reuse
    assert reused_blocks([]) == 0


def test_the_busiest_step_has_the_most_sequences_then_the_most_blocks():
    run = [step(0, (1, [0])), step(1, (1, [0, 1]), (2, [2])), step(2, (1, [0, 1, 3]), (2, [2])),
           step(3, (1, [0, 1, 3]))]
    assert busiest_step(run) == 2  # two sequences, like step 1, holding one block more
    assert busiest_step(run[:2]) == 1
    with pytest.raises(ValueError):
        busiest_step([])
