"""The CUDA-graph decode path's static buffers and padding, run eagerly on the CPU (replay=False):
padded rows must not disturb real ones, and the output must equal the plain decode step."""

from __future__ import annotations

import torch


def decode_logits(engine, prompts, steps):
    seqs = [engine.new_sequence(p, steps + 1, ignore_eos=True) for p in prompts]
    rows = []
    try:
        for seq in seqs:
            engine.reserve(seq, seq.num_uncomputed)
        engine.step([], [(s, s.num_uncomputed) for s in seqs])
        for _ in range(steps):
            for seq in seqs:
                engine.reserve(seq, 1)
            engine.step(seqs, [])
            rows.append(torch.stack([engine.runner.last_logits[s.id] for s in seqs]))
    finally:
        for seq in seqs:
            engine.release(seq)
    return [s.output_ids for s in seqs], torch.stack(rows)


def test_padded_static_decode_equals_eager(tiny_engine, tiny_engine_factory):
    prompts = [tiny_engine.tokenizer.encode(t) for t in ("A list", "The value of x is", "If")]
    eager_tokens, eager_logits = decode_logits(tiny_engine, prompts, 6)

    graphed = tiny_engine_factory(seed=3)
    graphed.use_decode_graphs(replay=False)
    graphs = graphed.runner.graphs
    assert graphs.size_for(3) == 4  # three sequences run padded to a batch of four
    scratch = graphs.scratch_block
    assert scratch not in graphed.blocks.free_blocks
    tokens, logits = decode_logits(graphed, prompts, 6)
    assert tokens == eager_tokens
    torch.testing.assert_close(logits, eager_logits, atol=2e-4, rtol=1e-4)
    assert graphed.blocks.num_free == graphed.blocks.num_blocks  # scratch stays out of the pool
