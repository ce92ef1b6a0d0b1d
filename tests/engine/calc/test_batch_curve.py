"""Lesson 4's analysis of a measured curve, and where a decode step's two kernels bend on a GPU."""

from __future__ import annotations

import pytest

from engine.calc.batch_curve import (
    GROWTH_CHOICES,
    doubling_gains,
    first_small_doubling,
    growth_choice,
    kv_equals_weights_batch,
    ladder,
    weight_ridge_batch,
)
from engine.calc.gpu_scaling import A100, H100, LLAMA_3_8B
from engine.calc.step_cost import decode_cost

CURVE = {1: 100.0, 2: 190.0, 4: 350.0, 8: 600.0, 16: 700.0, 32: 720.0, 128: 1.0}


def test_the_ladder_stops_at_the_first_gap():
    assert ladder(CURVE) == [1, 2, 4, 8, 16, 32]
    assert ladder({2: 1.0, 4: 2.0}) == []
    assert ladder(CURVE, top=8) == [1, 2, 4, 8]


def test_each_doubling_gain_is_the_ratio_less_one():
    gains = doubling_gains(CURVE)
    assert list(gains) == [2, 4, 8, 16, 32]
    assert gains[2] == pytest.approx(0.9) and gains[16] == pytest.approx(700 / 600 - 1)


def test_the_first_small_doubling():
    assert first_small_doubling(CURVE, 0.2) == 16  # 600 -> 700 is +17%
    assert first_small_doubling(CURVE, 0.05) == 32
    assert first_small_doubling(CURVE, 0.01) is None


def test_growth_choices_split_at_3_and_6():
    assert growth_choice(100, 600) == (GROWTH_CHOICES[0], 6.0)
    assert growth_choice(100, 599)[0] == GROWTH_CHOICES[1]
    assert growth_choice(100, 300)[0] == GROWTH_CHOICES[1]
    assert growth_choice(100, 299)[0] == GROWTH_CHOICES[2]


def test_the_weight_matmuls_reach_the_ridge_at_the_ridge_in_bf16():
    """The review's figures: B of about 153 on an A100 and 295 on an H100, whatever the context."""
    assert weight_ridge_batch(A100.ridge, 2) == 154  # 312,000 / 2,039 = 153.0...
    assert weight_ridge_batch(H100.ridge, 2) == 296  # 989,500 / 3,350 = 295.4
    # the weights' own intensity at that batch, from the step-cost formula, is the ridge
    b = weight_ridge_batch(H100.ridge, 2)
    assert 2 * b * LLAMA_3_8B.params / LLAMA_3_8B.weight_bytes >= H100.ridge


def test_half_saturation_is_where_the_kv_reads_equal_the_weights():
    b = kv_equals_weights_batch(LLAMA_3_8B.weight_bytes, LLAMA_3_8B.kv_bytes_per_token, 1000)
    assert b == pytest.approx(122.5, abs=0.5)  # 16.06 GB / (1,000 x 131,072 B)
    shape = LLAMA_3_8B.as_shape()
    step = decode_cost(shape, round(b), 1000)
    kv = step.bytes - LLAMA_3_8B.weight_bytes
    assert kv == pytest.approx(LLAMA_3_8B.weight_bytes, rel=0.01)
