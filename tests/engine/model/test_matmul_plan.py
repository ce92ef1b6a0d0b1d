"""The few-row product plans: every variant computes the same product, and a tuned plan names a
variant for every row count."""

from __future__ import annotations

import pytest
import torch

from engine.model.layers import Linear
from engine.model.matmul_plan import (
    MAX_TUNED_ROWS,
    ONE_CALL_MARGIN,
    TUNED_ROWS,
    VARIANTS,
    available_variants,
    choose,
    multiply,
    rows_plan,
    split_transposed,
    tune_rows,
    tune_rows_steps,
)


@pytest.fixture(params=VARIANTS)
def variant(request):
    """Each variant; "cpp" with the C++ library built (or skipped where it cannot be)."""
    if request.param == "cpp":
        request.getfixturevalue("cpp_kernel")
    return request.param


@pytest.mark.parametrize("out_features", [48, 47, 300])  # 47: a prime, so one piece
@pytest.mark.parametrize("rows", [1, 2, 3, 7, 16, 40])
def test_every_variant_computes_x_times_w_transposed(rows, variant, out_features):
    gen = torch.Generator().manual_seed(rows)
    weight = torch.randn(out_features, 24, generator=gen)
    x = torch.randn(rows, 24, generator=gen)
    out = multiply(x, weight, split_transposed(weight), variant)
    assert out.shape == (rows, out_features)
    torch.testing.assert_close(out, x @ weight.t(), atol=1e-5, rtol=1e-5)


def test_split_transposed_cuts_w_transposed_into_one_piece_per_thread():
    weight = torch.arange(8 * 3, dtype=torch.float32).reshape(8, 3)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(4)
        halves = split_transposed(weight)
        assert halves.shape == (4, 3, 2) and halves.is_contiguous()
        assert torch.equal(torch.cat(list(halves), dim=1), weight.t())
        assert split_transposed(torch.zeros(7, 3)).shape == (1, 3, 7)  # 7 = 7 x 1: one piece
    finally:
        torch.set_num_threads(threads)


def test_tuned_plan_covers_every_row_count():
    weights = [torch.randn(64, 32), torch.randn(32, 64)]
    plan = tune_rows([(w, split_transposed(w)) for w in weights], budget_s=0.01)
    assert len(plan) == len(TUNED_ROWS) and set(plan) <= set(available_variants())
    every = rows_plan(plan)
    assert len(every) == MAX_TUNED_ROWS


def test_choice_is_the_fastest_or_cpp_within_the_one_call_margin():
    """"cpp" also makes the whole decode step one call, so it wins a near tie; else the fastest."""
    assert choose({"linear": 1.0, "w_xt": 0.9}) == "w_xt"
    assert choose({"cpp": ONE_CALL_MARGIN * 0.99, "w_xt_split": 1.0, "linear": 1.5}) == "cpp"
    assert choose({"cpp": ONE_CALL_MARGIN * 1.01, "w_xt_split": 1.0}) == "w_xt_split"
    assert choose({"cpp": 0.5, "w_xt": 1.0}) == "cpp"


def test_untuned_row_counts_take_the_next_tuned_choice():
    tuned = [f"v{rows}" for rows in TUNED_ROWS]
    every = rows_plan(tuned)
    assert every[0] == "v1" and every[15] == "v16"
    assert every[16] == every[23] == "v24"  # 17..24 rows
    assert every[24] == "v32" and every[MAX_TUNED_ROWS - 1] == f"v{MAX_TUNED_ROWS}"


def test_linear_follows_its_plan_and_matches_f_linear():
    layer = Linear(32, 64)
    torch.nn.init.normal_(layer.weight)
    x = torch.randn(5, 3, 32)  # 15 rows, any leading shape
    expected = torch.nn.functional.linear(x, layer.weight)
    for variant in available_variants():
        layer.prepare_for_cpu_decode([variant] * MAX_TUNED_ROWS)
        torch.testing.assert_close(layer(x), expected, atol=1e-5, rtol=1e-5)
    assert layer(torch.randn(100, 32)).shape == (100, 64)  # past the tuned rows: F.linear


def test_cpp_variant_is_offered_and_timed_where_the_library_is_built(cpp_kernel):
    assert "cpp" in available_variants()
    weights = [torch.randn(64, 32)]
    plan = tune_rows([(w, split_transposed(w)) for w in weights], budget_s=0.01,
                     variants=("cpp",))
    assert set(plan) == {"cpp"}


def test_tuning_in_steps_yields_after_each_row_count_and_returns_the_plan():
    weights = [torch.randn(64, 32), torch.randn(32, 64)]
    steps = tune_rows_steps([(w, split_transposed(w)) for w in weights], budget_s=0.01)
    said = []
    while True:
        try:
            said.append(next(steps))
        except StopIteration as done:
            plan = done.value
            break
    assert len(said) == len(TUNED_ROWS) and said[-1].endswith(f"{len(TUNED_ROWS)} batch sizes")
    assert len(plan) == len(TUNED_ROWS) and set(plan) <= set(available_variants())


@pytest.mark.parametrize("in_features", [37, 768])
def test_cpp_rows_two_at_a_time_give_the_product(cpp_kernel, in_features):
    """The C++ rows_matmul takes input rows two at a time against four weight rows, and an odd
    last row, and the output columns past a multiple of four in a thread's range, its other ways:
    every row count from 1 to 17 gives x @ W.T (the sums' order differs: a float tolerance)."""
    gen = torch.Generator().manual_seed(in_features)
    weight = torch.randn(203, in_features, generator=gen)
    for rows in range(1, 18):
        x = torch.randn(rows, in_features, generator=gen)
        out = multiply(x, weight, split_transposed(weight), "cpp")
        torch.testing.assert_close(out, x @ weight.t(), atol=1e-4, rtol=1e-4)
