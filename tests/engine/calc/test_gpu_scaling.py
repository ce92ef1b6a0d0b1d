"""The "on a GPU" figures: datasheet limits through the engine's own formulas, checked against
worked examples done by hand."""

from __future__ import annotations

import pytest

from engine.calc.gpu_scaling import (
    A100,
    H100,
    LLAMA_3_8B,
    Machine,
    bend_batch,
    compute_bound_prompt,
    decode_step,
    decode_tokens_per_s,
    intensity_ceiling,
    kv_capacity,
    largest_batch_within,
    machine_from_info,
    on_gpu,
    prefill_floor_ms,
    step_floor_ms,
)


def test_ridge_points_from_the_datasheets():
    assert A100.ridge == pytest.approx(312_000 / 2039)  # 153.0 FLOP/byte
    assert H100.ridge == pytest.approx(989_500 / 3350)  # 295.4 FLOP/byte
    assert round(A100.ridge) == 153 and round(H100.ridge) == 295


def test_llama_3_8b_kv_bytes_and_capacity():
    # 2 (K and V) x 32 layers x 8 KV heads x 128 x 2 bytes = 131,072 bytes per token
    assert LLAMA_3_8B.kv_bytes_per_token == 131_072
    # (80 GB - 16.06 GB of bf16 weights) / (1,000 tokens x 131,072 bytes) = 487.8
    assert kv_capacity(LLAMA_3_8B, A100, 1000) == 487
    assert kv_capacity(LLAMA_3_8B, Machine("x", 1, 1), 1000) is None


def test_prefill_floor_is_compute_for_long_prompts_and_memory_for_short_ones():
    # 2 x 8.03e9 x 1,000 FLOPs / 312e12 FLOP/s = 51.47 ms
    assert prefill_floor_ms(LLAMA_3_8B, A100, 1000) == pytest.approx(51.474, rel=1e-3)
    # 10 tokens: reading 16.06 GB at 2,039 GB/s (7.88 ms) is longer than the arithmetic
    assert prefill_floor_ms(LLAMA_3_8B, A100, 10) == pytest.approx(16.06e9 / 2039e9 * 1000)
    # in bf16 a prompt of L tokens does about L FLOP per byte: compute-bound past the ridge
    assert compute_bound_prompt(LLAMA_3_8B, A100) == pytest.approx(A100.ridge)


def test_the_bend_is_where_decode_reaches_the_ridge():
    for gpu in (A100, H100):
        b = bend_batch(LLAMA_3_8B, gpu, 200)
        assert b is not None and b > 100  # a batch of hundreds with short contexts
        assert decode_step(LLAMA_3_8B, b, 200).intensity >= gpu.ridge
        assert decode_step(LLAMA_3_8B, b - 1, 200).intensity < gpu.ridge
    # with 1,000-token contexts each sequence's KV reads cap the intensity below both ridges
    assert intensity_ceiling(LLAMA_3_8B, 1000) < A100.ridge
    assert bend_batch(LLAMA_3_8B, A100, 1000) is None


def test_a_decode_step_floor_is_its_bytes_over_the_bandwidth():
    cost = decode_step(LLAMA_3_8B, 1, 1000)
    assert cost.bytes == pytest.approx(16.06e9 + 1000 * 131_072)
    assert step_floor_ms(cost, A100) == pytest.approx(cost.bytes / 2039e9 * 1000)


def test_this_machine_from_the_engine_info():
    info = {"device": "cpu", "device_name": "a CPU", "memory_bandwidth_gbs": 10.0,
            "matmul_gflops": 80.0}
    here = machine_from_info(info)
    assert here.ridge == 8.0 and here.measured and not on_gpu(info)
    assert on_gpu({"device": "cuda:0"})


def test_the_largest_batch_within_a_tpot_limit_is_the_last_whose_floor_fits():
    floor = lambda b: step_floor_ms(decode_step(LLAMA_3_8B, b, 1000), H100)  # noqa: E731
    limit = floor(40) + 1e-9
    assert largest_batch_within(LLAMA_3_8B, H100, 1000, limit) == 40
    assert floor(41) > limit
    assert largest_batch_within(LLAMA_3_8B, H100, 1000, floor(1) / 2) is None  # not even one
    held = kv_capacity(LLAMA_3_8B, H100, 1000)  # a loose limit stops at what memory holds
    assert largest_batch_within(LLAMA_3_8B, H100, 1000, 1e9) == held
    assert decode_tokens_per_s(LLAMA_3_8B, H100, 1000, 40) == pytest.approx(40 * 1000 / floor(40))
