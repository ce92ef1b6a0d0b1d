"""Sampling filters on hand-made logits, and seeded draws."""

from __future__ import annotations

import math

import pytest
import torch

from engine.sampler import SamplingParams, filter_logits, sample


def test_greedy_takes_the_argmax_per_row():
    logits = torch.tensor([[0.1, 3.0, 0.2], [5.0, 1.0, 4.9]])
    assert sample(logits, [SamplingParams(), SamplingParams()]) == [1, 0]


def test_top_k_keeps_the_k_largest():
    out = filter_logits(torch.tensor([1.0, 4.0, 3.0, 2.0]), top_k=2, top_p=1.0)
    assert torch.isfinite(out).tolist() == [False, True, True, False]


def test_top_p_keeps_the_smallest_set_reaching_p():
    probs = torch.tensor([0.5, 0.3, 0.15, 0.05])
    logits = probs.log()
    keep = torch.isfinite(filter_logits(logits, 0, 0.7)).tolist()
    assert keep == [True, True, False, False]  # 0.5 < 0.7 <= 0.8
    keep = torch.isfinite(filter_logits(logits, 0, 0.5)).tolist()
    assert keep == [True, False, False, False]
    keep = torch.isfinite(filter_logits(logits, 0, 0.01)).tolist()
    assert keep == [True, False, False, False]  # the most likely token always stays


def test_seeded_draws_repeat_and_follow_the_distribution():
    logits = torch.tensor([0.0, math.log(3.0)])  # p = 0.25, 0.75
    draws = [sample(logits[None], [SamplingParams(temperature=1.0, seed=s)])[0] for s in range(400)]
    again = [sample(logits[None], [SamplingParams(temperature=1.0, seed=s)])[0] for s in range(400)]
    assert draws == again
    share = sum(draws) / len(draws)
    assert abs(share - 0.75) < 4 * math.sqrt(0.75 * 0.25 / 400)


@pytest.mark.parametrize("bad", [dict(temperature=-1), dict(top_k=-2), dict(top_p=0.0),
                                 dict(top_p=1.5)])
def test_bad_sampling_settings_are_refused(bad):
    with pytest.raises(ValueError):
        SamplingParams(**bad).validate()
