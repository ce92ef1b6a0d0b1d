"""The sweep's shared prompt (engine.sweep): one prompt prefilled once and copied into every
member's own blocks must leave the batch exactly where a batched prefill of the same prompts
leaves it (the same keys and values, the same first token, the same next decode step), so a
knob point measures the same decode steps for a fraction of the prefill."""

from __future__ import annotations

import pytest
import torch

from engine.sweep import copy_prefill, measure_point, sweep_prompts

BATCH, PROMPT = 3, 20  # 20 tokens: a full block and part of a second


def prefilled(engine, shared: bool):
    prompt = sweep_prompts(engine.tokenizer.vocab_size, 1, PROMPT, seed=5)[0]
    seqs = [engine.new_sequence(list(prompt), 4, ignore_eos=True) for _ in range(BATCH)]
    for seq in seqs:
        engine.reserve(seq, PROMPT)
    if shared:
        engine.step([], [(seqs[0], PROMPT)])
        copy_prefill(engine, seqs[0], seqs[1:])
    else:
        engine.step([], [(seq, PROMPT) for seq in seqs])
    return seqs


def kv_of(engine, seq) -> torch.Tensor:
    blocks = torch.tensor(seq.block_table)
    slots = torch.stack([engine.cache.k[:, blocks], engine.cache.v[:, blocks]])
    return slots.flatten(2, 3)[:, :, :PROMPT].clone()  # (k/v, layers, positions, heads, dim)


def test_a_shared_prompt_leaves_the_batch_as_a_batched_prefill_does(tiny_engine):
    engine = tiny_engine
    batched = prefilled(engine, shared=False)
    shared = prefilled(engine, shared=True)
    try:
        for a, b in zip(batched, shared):
            assert a.block_table != b.block_table  # each member has blocks of its own
            assert torch.allclose(kv_of(engine, a), kv_of(engine, b), atol=1e-5)
            assert (a.num_computed, a.output_ids) == (b.num_computed, b.output_ids)
        for seqs in (batched, shared):
            for seq in seqs:
                engine.reserve(seq, 1)
        engine.step(batched, [])
        engine.step(shared, [])
        assert [s.output_ids for s in batched] == [s.output_ids for s in shared]
    finally:
        for seq in batched + shared:
            engine.release(seq)


def test_a_shared_prompt_point_prefills_one_prompt_and_times_the_same_steps(tiny_engine):
    point = measure_point(tiny_engine, batch_size=4, prompt_len=16, new_tokens=6,
                          shared_prompt=True)
    assert point.prefill == "shared" and point.batch_size == 4
    assert point.decode_steps_timed == 6 - 1 - 2
    assert point.prefill_tokens_per_s == pytest.approx(16_000 / point.ttft_ms)  # one prompt's
    # the cache it held at the end: every member's own blocks (4 x two blocks of 16 positions)
    assert point.kv_bytes == 4 * 2 * tiny_engine.cache.bytes_per_block
    assert measure_point(tiny_engine, 2, 16, 6).prefill == "batch"
