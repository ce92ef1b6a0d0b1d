"""Seeded workloads: reproducible, the right shapes, and arrival processes with the right
statistics (tolerances computed from the sample size, not guessed)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from engine.errors import ConfigError
from engine.serve.workload import (
    CORPUS_FILE,
    EOS_TEXT,
    WorkloadSpec,
    _corpus,
    gamma_arrivals,
    make_workload,
    poisson_arrivals,
)

SIGMAS = 4  # a tolerance of 4 standard errors fails by chance about once in 16,000 runs
N = 5000


def gaps(arrivals: list[float]) -> np.ndarray:
    return np.diff(np.asarray(arrivals))


@pytest.mark.parametrize("rate", [0.5, 5.0, 200.0])
def test_poisson_mean_rate_within_sampling_error(rate):
    g = gaps(poisson_arrivals(N + 1, rate, np.random.default_rng(1)))
    # Exponential gaps: standard deviation = mean = 1/rate, so the mean gap's standard error
    # is (1/rate) / sqrt(n).
    assert abs(g.mean() - 1 / rate) < SIGMAS * (1 / rate) / math.sqrt(N)
    assert g.min() >= 0


@pytest.mark.parametrize("burstiness", [0.25, 1.0, 4.0])
def test_gamma_cv_is_one_over_sqrt_burstiness(burstiness):
    rate = 10.0
    g = gaps(gamma_arrivals(N + 1, rate, burstiness, np.random.default_rng(2)))
    cv = 1 / math.sqrt(burstiness)
    assert abs(g.mean() - 1 / rate) < SIGMAS * cv * (1 / rate) / math.sqrt(N)
    # Standard error of the sample CV by the delta method: the sample SD of a gamma with shape K
    # (kurtosis 3 + 6/K) has relative variance (2 + 6/K) / 4n, the mean cv^2 / n; leaving out
    # their (positive) covariance overestimates the error, so the bound is conservative.
    se = cv * math.sqrt((2 + 6 / burstiness) / (4 * N) + cv**2 / N)
    assert abs(g.std(ddof=1) / g.mean() - cv) < SIGMAS * se


def test_infinite_rate_means_everything_at_once():
    rng = np.random.default_rng(0)
    assert poisson_arrivals(5, math.inf, rng) == [0.0] * 5
    assert gamma_arrivals(5, math.inf, 0.5, rng) == [0.0] * 5


def test_same_seed_same_workload_and_lengths_in_range():
    spec = WorkloadSpec(kind="gamma", requests=40, rate=20.0, burstiness=0.5,
                        prompt_len=(5, 30), output_len=(3, 9), seed=7)
    a, b = make_workload(spec, vocab=500), make_workload(spec, vocab=500)
    assert [(r.prompt_ids, r.output_len, r.arrival_s) for r in a] == \
           [(r.prompt_ids, r.output_len, r.arrival_s) for r in b]
    assert [r.id for r in a] == list(range(40))
    assert all(5 <= len(r.prompt_ids) <= 30 and 3 <= r.output_len <= 9 for r in a)
    assert all(0 <= t < 500 for r in a for t in r.prompt_ids)
    arrivals = [r.arrival_s for r in a]
    assert arrivals[0] == 0.0 and arrivals == sorted(arrivals)
    other = make_workload(WorkloadSpec(**{**spec.__dict__, "seed": 8}), vocab=500)
    assert [r.prompt_ids for r in other] != [r.prompt_ids for r in a]


def test_fixed_is_a_closed_loop():
    reqs = make_workload(WorkloadSpec(kind="fixed", requests=7, concurrency=3,
                                      prompt_len=(4, 4), output_len=(2, 2)), vocab=100)
    assert [r.arrival_s for r in reqs] == [0.0, 0.0, 0.0, None, None, None, None]
    assert all(len(r.prompt_ids) == 4 and r.output_len == 2 for r in reqs)


def test_interference_adds_one_long_prompt_late():
    spec = WorkloadSpec(kind="interference", requests=4, prompt_len=(8, 8), output_len=(5, 5),
                        long_prompt_len=300, long_at_s=0.25)
    reqs = make_workload(spec, vocab=100)
    assert [r.arrival_s for r in reqs] == [0.0] * 4 + [0.25]
    assert [len(r.prompt_ids) for r in reqs] == [8] * 4 + [300]
    assert all(r.output_len == 5 for r in reqs)


@pytest.mark.parametrize("change, words", [
    ({"kind": "bursty"}, "unknown workload"),
    ({"rate": 0.0}, "rate"),
    ({"burstiness": 0.0}, "burstiness"),
    ({"prompt_len": (9, 3)}, "prompt length"),
    ({"output_len": (0, 3)}, "output length"),
    ({"requests": 0}, "requests"),
    ({"long_at_s": -1.0}, "long-at"),
])
def test_bad_specs_are_refused_naming_the_limit(change, words):
    with pytest.raises(ConfigError, match=words):
        make_workload(WorkloadSpec(**change))


def test_prompts_are_corpus_text_of_exact_length():
    from engine.tokenizer import Tokenizer

    tok = Tokenizer()
    spec = WorkloadSpec(requests=6, prompt_len=(20, 400), output_len=(1, 1), seed=3)
    reqs = make_workload(spec, tok)
    text = _corpus(CORPUS_FILE)
    assert EOS_TEXT not in text
    for r in reqs:
        assert len(r.prompt_ids) in range(20, 401)
        assert tok.decode(r.prompt_ids[:-1]) in text  # the last token may be cut mid-word
