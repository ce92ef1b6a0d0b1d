"""The prefill curve's fit: t = a + b L + c L^2 recovered from synthetic points with known a, b,
c, its intervals covering them, and the attention crossover counted from a model's shape."""

from __future__ import annotations

import numpy as np
import pytest

from engine.calc.gpu_scaling import LLAMA_3_8B
from engine.calc.prefill_fit import attention_crossover, fit_lengths, fit_quadratic, t_975
from engine.calc.step_cost import prefill_cost

A, B, C = 3.0, 0.05, 2e-5  # ms, ms per token, ms per token^2


def test_exact_points_give_back_their_coefficients():
    lengths = [128, 256, 512, 1024, 1536, 2047]
    times = [A + B * n + C * n * n for n in lengths]
    fit = fit_quadratic(lengths, times)
    assert (fit.a.value, fit.b.value, fit.c.value) == pytest.approx((A, B, C), rel=1e-6)
    assert fit.r_squared == pytest.approx(1.0)
    assert fit.crossover == pytest.approx(B / C)  # 2,500 tokens: c L^2 = b L there
    assert fit.quadratic_part(2500) == pytest.approx(fit.linear_part(2500))
    assert fit.quadratic_share(2047) == pytest.approx(C * 2047 ** 2 / fit.predict(2047))


def test_noisy_points_are_bounded_by_their_intervals():
    rng = np.random.default_rng(1)
    lengths = np.repeat(fit_lengths(2048), 3)
    times = A + B * lengths + C * lengths ** 2 + rng.normal(0, 0.5, lengths.size)
    fit = fit_quadratic(lengths.tolist(), times.tolist())
    for coef, true in ((fit.a, A), (fit.b, B), (fit.c, C)):
        assert coef.low < true < coef.high
    assert fit.c.low > 0  # the attention term is there, beyond the noise
    # A straight line's points: the quadratic term's interval holds 0.
    line = fit_quadratic(lengths.tolist(), (A + B * lengths + rng.normal(0, 0.5, lengths.size))
                         .tolist())
    assert line.c.low < 0 < line.c.high


def test_three_points_fit_without_an_interval_and_two_are_refused():
    fit = fit_quadratic([1, 2, 3], [A + B + C, A + 2 * B + 4 * C, A + 3 * B + 9 * C])
    assert fit.c.value == pytest.approx(C, rel=1e-3) and fit.c.low is None
    with pytest.raises(ValueError, match="three or more distinct"):
        fit_quadratic([1, 1, 2], [1.0, 1.0, 2.0])


def test_the_crossover_is_where_step_costs_attention_flops_equal_its_weight_flops():
    shape = {"params": 1e6, "layers": 2, "heads": 4, "head_dim": 8, "hidden": 32,
             "vocab": 100, "weight_bytes": 4e6, "kv_bytes_per_token": 256}
    per_token = shape["params"] - shape["vocab"] * shape["hidden"]
    crossover = attention_crossover(per_token, shape["heads"], shape["head_dim"],
                                    shape["layers"])
    length = round(crossover)
    attention = 4 * length * (length + 1) / 2 * 4 * 8 * 2
    weights = 2 * length * per_token
    assert attention == pytest.approx(weights, rel=1e-3)
    assert prefill_cost(shape, length).flops == pytest.approx(
        attention + weights + 2 * shape["vocab"] * shape["hidden"])
    # Llama-3-8B: about 61 thousand tokens, beyond its 8k context.
    llama = attention_crossover(LLAMA_3_8B.params, LLAMA_3_8B.heads, LLAMA_3_8B.head_dim,
                                LLAMA_3_8B.layers)
    assert 60_000 < llama < 62_000


def test_fit_lengths_reach_the_context():
    assert fit_lengths(2048) == [255, 511, 767, 1023, 1279, 1535, 1791, 2047]
    assert fit_lengths(9, points=8) == [1, 2, 3, 4, 5, 6, 7, 8]


def test_students_t_table_meets_its_expansion():
    assert t_975(30) == pytest.approx(t_975(31), abs=0.003)
    assert t_975(120) == pytest.approx(1.980, abs=0.001)  # the table's value at 120
    with pytest.raises(ValueError):
        t_975(0)
