"""The engine against references: a full recompute with no cache, a plain contiguous-cache loop,
requests run alone, whole prefill. Greedy tokens must match and logits must be close."""

from __future__ import annotations

import pytest
import torch
from helpers import PROMPTS

from engine.generate import generate
from engine.model.layers import Linear
from engine.model.matmul_plan import MAX_TUNED_ROWS
from engine.model.model import full_logits
from engine.reference import ContiguousDecoder
from engine.sampler import SamplingParams

LONG_PROMPT = (
    "Return a new sorted list from the items in iterable. A custom key function can be supplied "
    "to customize the sort order, and the reverse flag can be set to request the result in "
    "descending order. The sort is stable: equal items keep their order."
)


def encode(engine, text: str) -> list[int]:
    return engine.tokenizer.encode(text)


def engine_logits(engine, prompt_ids, new_tokens, prefill_chunk=None):
    """Greedy tokens and, for each, the logits the engine chose it from."""
    seq = engine.new_sequence(prompt_ids, new_tokens)
    logits = []
    try:
        while seq.num_uncomputed > 1 or not seq.output_ids:
            n = seq.num_uncomputed if not prefill_chunk else min(prefill_chunk, seq.num_uncomputed)
            engine.reserve(seq, n)
            tokens = engine.step([], [(seq, n)])
            if tokens:
                logits.append(engine.runner.last_logits[seq.id])
        while not seq.done:
            engine.reserve(seq, 1)
            engine.step([seq], [])
            logits.append(engine.runner.last_logits[seq.id])
    finally:
        engine.release(seq)
    return seq.output_ids, torch.stack(logits)


@pytest.mark.parametrize("text", PROMPTS)
def test_cached_decode_equals_full_recompute(engine, text):
    prompt = encode(engine, text)
    tokens, logits = engine_logits(engine, prompt, 24)
    with torch.inference_mode():
        full = full_logits(engine.model, torch.tensor([prompt + tokens]))[0]
    reference = full[len(prompt) - 1 : -1]  # the positions that chose each new token
    assert reference.argmax(-1).tolist() == tokens
    torch.testing.assert_close(logits, reference, atol=2e-4, rtol=1e-4)


def test_paged_equals_contiguous_cache(engine):
    """Three prompts of the same length, batched, on shuffled blocks vs one contiguous tensor."""
    check_against_contiguous_cache(engine)


@pytest.mark.parametrize("variant", ["cpp", "linear", "w_xt", "w_xt_split", "w_xt_pad"])
def test_cpp_one_call_decode_step_equals_contiguous_cache(tiny_engine_factory, cpp_kernel,
                                                          variant):
    """The cpp backend's decode steps run the whole model in one C++ call whichever product
    layout the plan picks (csrc/fused_ops.cpp `product`); its model adds each residual in the
    norm after it and runs SwiGLU's activation in one call. Every layout matches the plain
    contiguous-cache loop."""
    engine = tiny_engine_factory(seed=2, backend="cpp")
    model = engine.model
    for module in model.modules():
        if isinstance(module, Linear):
            module.plan = [variant] * MAX_TUNED_ROWS
    assert model.norm.fused_add is not None
    assert model.layers[0].mlp.silu_mul is not None
    step_calls = []
    model.decode_model = lambda *args, op=model.decode_model: step_calls.append(1) or op(*args)
    decode_steps = check_against_contiguous_cache(engine)
    assert engine.runner.attention.fused_qkv is not None  # the last (decode) step took it
    assert len(step_calls) == decode_steps


def check_against_contiguous_cache(engine) -> int:
    """Greedy tokens and logits of three prompts batched, against ContiguousDecoder; returns how
    many decode steps ran."""
    ids = [encode(engine, t) for t in PROMPTS]
    length = min(len(i) for i in ids)
    prompts = [i[:length] for i in ids]
    new_tokens = 20
    reference = ContiguousDecoder(engine.model, len(prompts), length + new_tokens)
    ref_tokens, ref_logits = reference.generate(torch.tensor(prompts), new_tokens)

    seqs = [engine.new_sequence(p, new_tokens) for p in prompts]
    step_logits = []
    try:
        for seq in seqs:
            engine.reserve(seq, length)
        engine.step([], [(s, length) for s in seqs])
        step_logits.append(torch.stack([engine.runner.last_logits[s.id] for s in seqs]))
        while not seqs[0].done:
            for seq in seqs:
                engine.reserve(seq, 1)
            engine.step(seqs, [])
            step_logits.append(torch.stack([engine.runner.last_logits[s.id] for s in seqs]))
    finally:
        for seq in seqs:
            engine.release(seq)
    assert [s.output_ids for s in seqs] == ref_tokens.tolist()
    torch.testing.assert_close(torch.stack(step_logits), torch.stack(ref_logits),
                               atol=2e-4, rtol=1e-4)
    return len(step_logits) - 1


@pytest.mark.parametrize(("backend", "variant"), [("torch", None), ("cpp", "linear"),
                                                  ("cpp", "cpp")])
def test_mixed_lengths_batched_decode_equals_full_recompute(tiny_engine_factory, backend,
                                                            variant, request):
    """One long context beside short ones and a one-token prompt, decoded together: each CPU
    attention path (torch's length groups, the C++ kernel between the products, the whole step
    in one C++ call) gives every sequence the logits of a full recompute of its own tokens."""
    if backend == "cpp":
        request.getfixturevalue("cpp_kernel")  # built once, or the test is skipped
    engine = tiny_engine_factory(seed=5, backend=backend)
    if variant is not None:  # the products pinned: one call per step with "cpp", none without
        for module in engine.model.modules():
            if isinstance(module, Linear):
                module.plan = [variant] * MAX_TUNED_ROWS
    long_prompt = encode(engine, LONG_PROMPT * 4)
    prompts = [encode(engine, PROMPTS[0]), long_prompt, encode(engine, "A")[:1],
               encode(engine, PROMPTS[2])]
    assert len(long_prompt) > 150 and len(prompts[2]) == 1
    seqs = [engine.new_sequence(p, 8, ignore_eos=True) for p in prompts]
    logits = {seq.id: [] for seq in seqs}
    try:
        for seq in seqs:
            engine.reserve(seq, seq.num_uncomputed)
            engine.step([], [(seq, seq.num_uncomputed)])
        while not seqs[0].done:
            for seq in seqs:
                engine.reserve(seq, 1)
            engine.step(seqs, [])
            for seq in seqs:
                logits[seq.id].append(engine.runner.last_logits[seq.id])
        for seq in seqs:
            with torch.inference_mode():
                full = full_logits(engine.model, torch.tensor([seq.token_ids]))[0]
            reference = full[len(seq.prompt_ids): -1]  # the positions decoded together
            torch.testing.assert_close(torch.stack(logits[seq.id]), reference,
                                       atol=2e-4, rtol=1e-4)
    finally:
        for seq in seqs:
            engine.release(seq)


def test_ragged_batch_equals_requests_alone(engine):
    prompts = [encode(engine, t) for t in PROMPTS] + [encode(engine, "import")]
    together = generate(engine, prompts, 16, ignore_eos=True)
    for prompt, gen in zip(prompts, together):
        [alone] = generate(engine, [prompt], 16, ignore_eos=True)
        assert gen.seq.output_ids == alone.seq.output_ids
        assert len(gen.token_times) == 16


@pytest.mark.parametrize("chunk", [1, 5, 16, 17])
def test_chunked_prefill_equals_whole_prefill(engine, chunk):
    prompt = encode(engine, LONG_PROMPT)
    assert len(prompt) > 2 * 17
    whole_tokens, whole_logits = engine_logits(engine, prompt, 8)
    chunk_tokens, chunk_logits = engine_logits(engine, prompt, 8, prefill_chunk=chunk)
    assert chunk_tokens == whole_tokens
    torch.testing.assert_close(chunk_logits, whole_logits, atol=2e-4, rtol=1e-4)


def test_seeded_sampling_is_deterministic_and_batch_independent(engine):
    prompt = encode(engine, PROMPTS[0])
    params = SamplingParams(temperature=0.9, top_k=50, top_p=0.95, seed=7)
    [a] = generate(engine, [prompt], 24, params, ignore_eos=True)
    [b] = generate(engine, [prompt], 24, params, ignore_eos=True)
    assert a.seq.output_ids == b.seq.output_ids
    [c] = generate(engine, [prompt], 24, SamplingParams(0.9, 50, 0.95, seed=8), ignore_eos=True)
    assert c.seq.output_ids != a.seq.output_ids
    # The first request of a batch gets the shared seed, so it samples the same tokens as alone.
    batch = generate(engine, [prompt, encode(engine, PROMPTS[1])], 24, params, ignore_eos=True)
    assert batch[0].seq.output_ids == a.seq.output_ids


def test_greedy_output_is_mostly_words(engine):
    """The shipped model writes text: most of what it says are dictionary-looking words."""
    [gen] = generate(engine, [encode(engine, "The function returns")], 40, ignore_eos=True)
    words = gen.text.split()
    assert len(words) >= 10
    alphabetic = [w for w in words if w.strip(".,;:()'\"`").isalpha()]
    assert len(alphabetic) >= 0.6 * len(words), gen.text


def test_padding_rows_are_computed_but_change_nothing(engine):
    """A fixed-size batch's empty slots: dummy rows written to the scratch block, never sampled."""
    prompts = [encode(engine, t) for t in PROMPTS[:2]]

    def decode(padding: int):
        seqs = [engine.new_sequence(p, 6, ignore_eos=True) for p in prompts]
        rows = []
        try:
            for seq in seqs:
                engine.reserve(seq, seq.num_uncomputed)
            engine.step([], [(s, s.num_uncomputed) for s in seqs])
            while not seqs[0].done:
                for seq in seqs:
                    engine.reserve(seq, 1)
                tokens = engine.step(seqs, [], padding=padding)
                assert set(tokens) == {s.id for s in seqs}
                rows.append(torch.stack([engine.runner.last_logits[s.id] for s in seqs]))
        finally:
            for seq in seqs:
                engine.release(seq)
        return [s.output_ids for s in seqs], torch.stack(rows)

    plain_tokens, plain_logits = decode(0)
    padded_tokens, padded_logits = decode(5)
    assert padded_tokens == plain_tokens
    torch.testing.assert_close(padded_logits, plain_logits, atol=2e-4, rtol=1e-4)
    assert engine.scratch_block not in engine.blocks.free_blocks
