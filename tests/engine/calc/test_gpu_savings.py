"""engine.calc.gpu_savings: a prefix-cache hit's saving and the TPOT floor of each weight format,
against the figures worked out by hand from the datasheets (Llama-3-8B, H100 and A100)."""

from __future__ import annotations

import pytest

from engine.calc.gpu_savings import (
    BF16,
    EIGHT_BIT,
    FOUR_BIT,
    prefix_hit_saving_ms,
    tpot_floor_ms,
    weight_bytes,
)
from engine.calc.gpu_scaling import A100, H100, LLAMA_3_8B, prefill_floor_ms


def test_a_hit_saves_less_than_the_shared_prompts_own_floor_at_a_short_suffix():
    # 1,024 shared tokens, 48 of the request's own: 17.4 - 4.8 = 12.6 ms on an H100
    saving = prefix_hit_saving_ms(LLAMA_3_8B, H100, 1024, 48)
    assert saving == pytest.approx(12.6, abs=0.1)
    assert prefill_floor_ms(LLAMA_3_8B, H100, 1024) == pytest.approx(16.6, abs=0.1)
    assert saving < prefill_floor_ms(LLAMA_3_8B, H100, 1024)
    assert prefix_hit_saving_ms(LLAMA_3_8B, A100, 1024, 48) == pytest.approx(47.3, abs=0.1)


def test_a_hit_saves_the_shared_floor_once_the_suffix_is_compute_bound():
    own = 4000  # long enough that the own part's prefill is compute-bound on its own
    saving = prefix_hit_saving_ms(LLAMA_3_8B, H100, 1024, own)
    assert saving == pytest.approx(2 * LLAMA_3_8B.params * 1024 / (H100.peak_gflops * 1e9) * 1000)


def test_weights_halve_and_quarter_from_bf16():
    assert weight_bytes(LLAMA_3_8B, BF16) == pytest.approx(16.06e9)
    assert weight_bytes(LLAMA_3_8B, EIGHT_BIT) == pytest.approx(8.03e9)
    assert weight_bytes(LLAMA_3_8B, FOUR_BIT) == pytest.approx(4.015e9)


def test_the_h100_tpot_floor_at_batch_1_follows_the_weight_bytes():
    floors = [tpot_floor_ms(LLAMA_3_8B, f, H100) for f in (BF16, EIGHT_BIT, FOUR_BIT)]
    assert floors == pytest.approx([4.79, 2.40, 1.20], abs=0.01)  # bytes / 3,350 GB/s
    # the cache does not shrink with the weights: at a long context the ratio is under 2
    long = [tpot_floor_ms(LLAMA_3_8B, f, H100, batch=1, context=8000) for f in (BF16, EIGHT_BIT)]
    assert 1 < long[0] / long[1] < 2
