"""The few-row product plans: every variant computes the same product, and a tuned plan names a
variant for every row count."""

from __future__ import annotations

from collections import Counter

import pytest
import torch

from engine.config import get_preset
from engine.llm_engine import build_model_steps
from engine.model import matmul_plan
from engine.model.layers import Linear
from engine.model.matmul_plan import (
    DROP,
    MAX_TUNED_ROWS,
    PAD_ROWS,
    STEP_PRODUCTS,
    TUNED_ROWS,
    VARIANTS,
    available_variants,
    choose,
    multiply,
    plan_key,
    rows_plan,
    split_transposed,
    time_variants,
    time_variants_steps,
    tune_rows,
    tune_rows_steps,
)
from engine.model.model import LlamaModel, full_logits
from engine.paths import write_json_atomic


def said_and_done(steps):
    """Every step's words, and the result (engine.steps)."""
    said = []
    while True:
        try:
            said.append(next(steps))
        except StopIteration as done:
            return said, done.value


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


def test_choice_is_the_fastest_product_and_cpp_on_a_tie():
    """Every layout makes the same one-call step where the library is built, so the products
    choose by their time alone (the whole step weighs the choice after: step_plan)."""
    assert choose({"linear": 1.0, "w_xt": 0.9}) == "w_xt"
    assert choose({"cpp": 1.0, "w_xt_split": 1.0, "linear": 1.5}) == "cpp"
    assert choose({"cpp": 1.01, "w_xt_split": 1.0}) == "w_xt_split"
    assert choose({"cpp": 0.5, "w_xt": 1.0}) == "cpp"


def test_where_the_library_is_built_every_offered_layout_runs_in_the_one_call_step(cpp_kernel):
    """No layout that needs the transposed copies: the one-call step reads the weights as held."""
    assert set(available_variants()) == set(STEP_PRODUCTS)


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


def test_a_layer_keeps_the_transposed_copy_only_while_its_plan_multiplies_by_it():
    """The copy is as big as the weight: a plan with no "x_wt" (on this machine, with the C++
    library built, the plans are "cpp" nearly everywhere) must not hold it."""
    layer = Linear(32, 64)
    torch.nn.init.normal_(layer.weight)
    x = torch.randn(6, 32)
    expected = torch.nn.functional.linear(x, layer.weight)
    layer.prepare_for_cpu_decode(["w_xt_split"] * MAX_TUNED_ROWS)
    assert layer.weight_t is None
    torch.testing.assert_close(layer(x), expected, atol=1e-5, rtol=1e-5)
    layer.prepare_for_cpu_decode(["w_xt"] * 5 + ["x_wt"] * (MAX_TUNED_ROWS - 5))
    assert torch.equal(layer.weight_t, split_transposed(layer.weight.detach()))
    torch.testing.assert_close(layer(x), expected, atol=1e-5, rtol=1e-5)  # 6 rows: "x_wt"
    layer.prepare_for_cpu_decode(["linear"] * MAX_TUNED_ROWS)
    assert layer.weight_t is None


@pytest.mark.parametrize("variant", ["w_xt", "x_wt"])
def test_a_models_build_lays_out_transposed_weights_only_for_a_plan_that_uses_them(
        variant, monkeypatch, tmp_path):
    """The plan is on disk (as `python -m engine tune` leaves it): the build reads it, makes
    the transposed copies only for "x_wt", and the model computes what plain products do."""
    monkeypatch.setenv("LLM_SPEED_CACHE", str(tmp_path))
    reference = LlamaModel(get_preset("tiny"))
    reference.init_random(0)
    reference.eval()
    weights = [m.weight.detach() for m in reference.modules() if isinstance(m, Linear)]
    write_json_atomic(matmul_plan._plan_file(),
                      {plan_key(weights)[1]: [variant] * len(TUNED_ROWS)})
    said, model = said_and_done(build_model_steps("tiny", "cpu", random_weights=True))
    assert not [s for s in said if "timed" in s]  # read from disk
    linears = [m for m in model.modules() if isinstance(m, Linear)]
    assert all(m.plan == [variant] * MAX_TUNED_ROWS for m in linears)
    assert all((m.weight_t is not None) == (variant == "x_wt") for m in linears)
    assert ("weights laid out for small batches" in said) == (variant == "x_wt")
    ids = torch.tensor([[3, 9, 27, 81, 243, 7]])
    with torch.no_grad():
        torch.testing.assert_close(full_logits(model, ids), full_logits(reference, ids),
                                   atol=1e-4, rtol=1e-4)


def test_cpp_variant_is_offered_and_timed_where_the_library_is_built(cpp_kernel):
    assert "cpp" in available_variants()
    weights = [torch.randn(64, 32)]
    plan = tune_rows([(w, split_transposed(w)) for w in weights], budget_s=0.01,
                     variants=("cpp",))
    assert set(plan) == {"cpp"}


def test_tuning_in_steps_yields_after_each_row_count_and_returns_the_plan():
    weights = [torch.randn(64, 32), torch.randn(32, 64)]
    said, plan = said_and_done(
        tune_rows_steps([(w, split_transposed(w)) for w in weights], budget_s=0.01))
    counts = [words for words in said if words.endswith("batch sizes")]
    assert len(counts) == len(TUNED_ROWS) and said[-1].endswith(f"{len(TUNED_ROWS)} batch sizes")
    assert len(plan) == len(TUNED_ROWS) and set(plan) <= set(available_variants())
    assert all(words in counts or ": round " in words for words in said)  # or between rounds


@pytest.mark.parametrize("in_features", [37, 768])
def test_cpp_rows_in_tiles_give_the_product(cpp_kernel, in_features):
    """The C++ rows_matmul takes input rows a register tile at a time against four weight rows,
    and the rows past a whole tile and the output columns past a multiple of four in a thread's
    range its other ways: every row count from 1 to 17 gives x @ W.T (the sums' order differs: a
    float tolerance; tests/engine/model/test_rows_matmul.py covers the kernel's own cases)."""
    gen = torch.Generator().manual_seed(in_features)
    weight = torch.randn(203, in_features, generator=gen)
    for rows in range(1, 18):
        x = torch.randn(rows, in_features, generator=gen)
        out = multiply(x, weight, split_transposed(weight), "cpp")
        torch.testing.assert_close(out, x @ weight.t(), atol=1e-4, rtol=1e-4)


# Passes in ms, round by round, recorded on a 2-core machine's engine core (tiny's and small's
# weights): x_wt's first pass at a new row count is the slowest of its three.
MEASURED = {
    "tiny, 4 rows": {"x_wt": (3.0, 2.1, 2.1), "w_xt": (1.2, 1.2, 1.1), "w_xt_split": (1.2, 1.1, 1.2),
                     "w_xt_pad": (3.4, 3.3, 3.4), "linear": (2.0, 1.8, 2.1),
                     "cpp": (1.6, 1.5, 1.6)},
    "tiny, 5 rows": {"x_wt": (3.0, 2.5, 2.6), "w_xt": (1.6, 1.5, 1.5), "w_xt_split": (1.5, 1.5, 1.6),
                     "w_xt_pad": (3.7, 3.6, 3.6), "linear": (2.3, 2.4, 2.3),
                     "cpp": (1.7, 1.7, 1.7)},
    "small, 1 row": {"x_wt": (21.7, 21.8, 21.9), "w_xt": (29.0, 28.9, 29.4),
                     "w_xt_split": (28.9, 29.2, 29.8), "w_xt_pad": (83.4, 83.5, 84.0),
                     "linear": (29.0, 29.0, 28.9), "cpp": (15.9, 16.1, 16.0)},
    "small, 64 rows": {"x_wt": (204.5, 195.9, 190.9), "w_xt": (199.5, 203.2, 199.1),
                       "w_xt_split": (198.4, 201.5, 199.0), "linear": (191.7, 196.5, 192.7),
                       "cpp": (157.6, 150.3, 152.2)},
    # a hiccup of 40% on the fastest variant's first pass: it must stay in the running
    "hiccup": {"w_xt": (1.4, 1.0, 1.0), "w_xt_split": (1.1, 1.1, 1.1), "linear": (2.0, 2.0, 2.0)},
}


def replay(rounds: dict[str, tuple[float, ...]]):
    """one_pass for time_variants from recorded passes; counts the passes asked for."""
    passes = {v: iter(times) for v, times in rounds.items()}
    asked = []

    def one_pass(variant: str) -> float:
        asked.append(variant)
        return next(passes[variant])
    return one_pass, asked


@pytest.mark.parametrize("case", MEASURED)
def test_dropping_clear_losers_chooses_as_timing_every_variant_every_round(case):
    rounds = MEASURED[case]
    variants = tuple(rounds)
    full, full_asked = replay(rounds)
    pruned, pruned_asked = replay(rounds)
    expected = choose(time_variants(full, variants, 3, drop=None))
    assert choose(time_variants(pruned, variants, 3)) == expected
    assert len(full_asked) == 3 * len(variants)
    assert len(pruned_asked) <= len(full_asked)  # small at 64 rows: all within DROP, all kept
    assert pruned_asked[:len(variants)] == list(variants)  # every variant is timed once


def test_a_variant_is_dropped_only_when_more_than_drop_times_slower_as_choose_weighs_it():
    one_pass, asked = replay({"w_xt": (1.0, 1.0), "linear": (DROP * 0.99, 9.0),
                              "x_wt": (DROP * 1.01, 9.0),
                              "cpp": (DROP * 0.99, 9.0)})
    times = time_variants(one_pass, ("w_xt", "linear", "x_wt", "cpp"), 2)
    assert asked == ["w_xt", "linear", "x_wt", "cpp", "w_xt", "linear", "cpp"]
    assert times["x_wt"] == DROP * 1.01  # kept from its one pass
    assert choose(times) == "w_xt"


def test_tuning_stops_at_a_row_count_once_one_variant_is_left():
    one_pass, asked = replay({"cpp": (1.0, 1.0, 1.0), "w_xt": (3.0, 3.0, 3.0),
                              "linear": (4.0, 4.0, 4.0)})
    assert choose(time_variants(one_pass, ("cpp", "w_xt", "linear"), 3)) == "cpp"
    assert asked == ["cpp", "w_xt", "linear"]


def test_timing_in_steps_yields_between_rounds_so_a_build_can_pause_there():
    """A step is one round: one pass of each variant left (small at 64 rows: 1 s on one core)."""
    one_pass, asked = replay({"w_xt": (1.0, 1.0, 1.0), "linear": (1.1, 1.1, 1.1)})
    steps = time_variants_steps(one_pass, ("w_xt", "linear"), 3, said="at 64 rows")
    assert next(steps) == "at 64 rows: round 1" and asked == ["w_xt", "linear"]
    assert next(steps) == "at 64 rows: round 2" and len(asked) == 4
    with pytest.raises(StopIteration) as done:
        next(steps)
    assert len(asked) == 6 and choose(done.value.value) == "w_xt"


def test_w_xt_pad_is_not_timed_where_it_is_w_xt(monkeypatch):
    """From PAD_ROWS rows on "w_xt_pad" pads nothing: the same product as "w_xt"."""
    timed = []
    real = matmul_plan.multiply

    def counting(rows, weight, weight_t, variant):
        timed.append((rows.shape[0], variant))
        return real(rows, weight, weight_t, variant)

    monkeypatch.setattr(matmul_plan, "multiply", counting)
    weights = [torch.randn(64, 32)]
    pairs = [(w, split_transposed(w)) for w in weights]
    variants = ("w_xt", "w_xt_pad", "linear")
    tune_rows(pairs, budget_s=0.01, variants=variants)
    assert not [rows for rows, v in timed if v == "w_xt_pad" and rows >= PAD_ROWS]
    assert [rows for rows, v in timed if v == "w_xt_pad" and rows < PAD_ROWS]
    timed.clear()
    tune_rows(pairs, budget_s=0.01, variants=variants, drop=None)  # every variant, every round
    assert {rows for rows, v in timed if v == "w_xt_pad"} == set(TUNED_ROWS)
    at_most_rows = Counter(v for rows, v in timed if rows == MAX_TUNED_ROWS)
    assert set(at_most_rows) == set(variants) and min(at_most_rows.values()) >= 2
