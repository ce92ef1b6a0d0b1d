"""The KV handover: the decode side's blocks hold the prefill's K and V bit for bit, and a
sequence decoded after its handover gives the tokens it gives without one."""

from __future__ import annotations

import torch

from engine.disagg.handover import import_kv, make_handover


def blocks_of(engine, seq):
    index = torch.tensor(seq.block_table)
    return engine.cache.k[:, index].clone(), engine.cache.v[:, index].clone()


def decode(engine, seq, steps: int) -> list[int]:
    for _ in range(steps):
        assert engine.reserve(seq, 1)
        engine.step([seq], [])
    return list(seq.output_ids)


def test_handed_over_kv_equals_the_prefills_bit_for_bit_and_decodes_the_same(engine):
    prompt = engine.tokenizer.encode("The handover copies every layer of every block " * 2)
    seq = engine.new_sequence(prompt, 6, ignore_eos=True)
    assert engine.reserve(seq, seq.num_uncomputed)
    engine.step([], [(seq, seq.num_uncomputed)])
    k, v = blocks_of(engine, seq)
    handover = make_handover(engine, seq)
    assert handover.k.is_shared() and handover.v.is_shared()
    assert torch.equal(handover.k, k) and torch.equal(handover.v, v)
    assert handover.output_ids == seq.output_ids and handover.num_computed == len(prompt)

    # hold the original's blocks, so the handed-over copy lands in other blocks of the pool
    moved = import_kv(engine, handover)
    try:
        assert not set(moved.block_table) & set(seq.block_table)
        moved_k, moved_v = blocks_of(engine, moved)
        assert torch.equal(moved_k, k) and torch.equal(moved_v, v)
        assert moved.num_computed == seq.num_computed and moved.output_ids == seq.output_ids
        assert decode(engine, moved, 5) == decode(engine, seq, 5)
    finally:
        engine.release(seq)
        engine.release(moved)
