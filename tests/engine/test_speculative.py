"""Speculative decoding: greedy acceptance must give exactly plain greedy decoding's tokens, on
the real tiny model with both drafts, several k, a batch of prompts; rejected tokens' cache
entries are rolled back (num_computed and blocks), and the counts add up."""

from __future__ import annotations

import pytest
from helpers import PROMPTS

from engine.block_manager import blocks_for
from engine.errors import ConfigError
from engine.generate import generate
from engine.speculative import (
    ModelDraft,
    NgramDraft,
    SpeculativeDecoder,
    accepted_length,
    expected_tokens_per_step,
    ngram_lookup,
)

NEW_TOKENS = 32


def test_ngram_lookup_proposes_what_followed_the_latest_match():
    assert ngram_lookup([1, 2, 3, 9, 1, 2, 3, 8, 5, 1, 2, 3], 2) == [8, 5]
    assert ngram_lookup([1, 2, 3, 4, 2, 3], 5) == [4, 2, 3]  # may run into its own suffix
    assert ngram_lookup([5, 6, 7], 3) == []
    assert ngram_lookup([7, 7], 3) == [7]
    assert ngram_lookup([1, 2, 1, 2], 0) == []


def test_acceptance_and_the_formula():
    assert accepted_length([4, 5, 6], [4, 5, 9, 1]) == 2
    assert accepted_length([4, 5], [4, 5, 7]) == 2
    assert accepted_length([], [3]) == 0
    assert expected_tokens_per_step(0.5, 2) == pytest.approx(1.75)  # 1 + a + a^2
    assert expected_tokens_per_step(1.0, 4) == 5
    assert expected_tokens_per_step(0.0, 4) == 1


@pytest.fixture(scope="module")
def prompts(tiny_engine):
    return [tiny_engine.tokenizer.encode(p) for p in PROMPTS]


@pytest.fixture(scope="module")
def plain(tiny_engine, prompts):
    return [g.seq.output_ids for g in generate(tiny_engine, prompts, NEW_TOKENS,
                                                ignore_eos=True)]


@pytest.fixture(scope="module")
def model_draft(tiny_engine):
    return ModelDraft.for_target(tiny_engine)


class Checked(SpeculativeDecoder):
    """Checks the rollback after every verify step."""

    def step(self, seqs):
        out = super().step(seqs)
        block = self.engine.cache.block_size
        for seq in seqs:
            assert seq.num_computed == seq.num_tokens - 1
            assert len(seq.block_table) == blocks_for(seq.num_computed, block)
        return out


@pytest.mark.parametrize("method,k", [("ngram", 1), ("ngram", 3), ("draft", 2), ("draft", 4)])
def test_speculative_output_equals_plain_greedy(engine, prompts, plain, request, method, k):
    model_draft = request.getfixturevalue("model_draft") if method == "draft" else None
    draft = model_draft or NgramDraft()
    spec = Checked(engine, draft, k)
    gens = generate(engine, prompts, NEW_TOKENS, ignore_eos=True, speculative=spec)
    assert [g.seq.output_ids for g in gens] == plain
    s = spec.stats
    # every round yields its accepted draft tokens plus one of the target's
    assert s.tokens == s.accepted + s.rounds == len(prompts) * (NEW_TOKENS - 1)
    assert s.proposed == sum(n * count for n, count in s.proposal_lengths.items())
    assert s.accepted <= s.proposed and s.rejections <= s.rounds and s.steps < NEW_TOKENS - 1
    assert max(s.proposal_lengths) <= k
    assert s.accepted > 0  # these prompts loop: both drafts guess some tokens right
    for g in gens:  # tokens that arrive together share a time
        assert len(g.token_times) == NEW_TOKENS
    if method == "draft":
        assert not model_draft.mirrors and model_draft.engine.blocks.num_used == 0


def test_speculation_refuses_sampling(engine, prompts):
    from engine.sampler import SamplingParams

    spec = SpeculativeDecoder(engine, NgramDraft(), 2)
    with pytest.raises(ConfigError, match="greedily"):
        generate(engine, prompts[:1], 4, SamplingParams(temperature=0.8), speculative=spec)
    with pytest.raises(ConfigError, match="1 to 16"):
        SpeculativeDecoder(engine, NgramDraft(), 0)
