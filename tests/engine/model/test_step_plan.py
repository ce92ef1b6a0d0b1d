"""The plan weighed in the whole decode step: its choices replayed from recorded step timings,
and the monotonic rule (a batch's step no slower than a larger batch's) with its re-timing."""

from __future__ import annotations

import pytest

from engine.model.matmul_plan import TUNED_ROWS
from engine.model.step_plan import (
    RETIMES,
    SLACK,
    broken,
    faster_larger,
    fastest,
    settle_steps,
)
from engine.steps import run_steps


def rising(per_row_ms: float, base_ms: float) -> dict[int, float]:
    """A memory-bound step: nearly flat, rising with the rows (seconds at each tuned count)."""
    return {rows: (base_ms + per_row_ms * rows) / 1000 for rows in TUNED_ROWS}


def replayed(recorded: dict[str, dict[int, list[float]]]):
    """time_steps from recorded passes: each (variant, rows) gives its passes in turn (the last
    one again when asked more often); the calls are kept to check what was re-timed."""
    asked: list[tuple[int, tuple[str, ...]]] = []
    used: dict[tuple[str, int], int] = {}

    def time_steps(rows: int, variants: tuple[str, ...]) -> dict[str, float]:
        asked.append((rows, variants))
        out = {}
        for v in variants:
            passes = recorded[v][rows]
            n = used.get((v, rows), 0)
            out[v] = passes[min(n, len(passes) - 1)]
            used[(v, rows)] = n + 1
        return out

    return time_steps, asked


def flat(times: dict[int, float]) -> dict[int, list[float]]:
    return {rows: [t] for rows, t in times.items()}


def test_the_whole_step_decides_between_the_products_choice_and_the_one_call():
    """tiny on a VM where the products alone picked w_xt_split at 1 row: the whole step with
    "cpp" is faster there, so the plan takes it; where the products' choice wins its step, it
    stays."""
    cpp = rising(0.02, 3.3)
    split = {rows: t + 0.0002 for rows, t in cpp.items()}
    split[1] = 5.09 / 1000  # the slow path at batch 1
    split[6] = cpp[6] - 0.00001
    time_steps, _ = replayed({"cpp": flat(cpp), "w_xt_split": flat(split)})
    tuned = ["w_xt_split"] + ["cpp"] * (len(TUNED_ROWS) - 1)
    tuned[5] = "w_xt_split"  # 6 rows: the products' choice, faster in the step too
    plan, seconds = run_steps(settle_steps(tuned, ("cpp",), time_steps))
    assert plan[0] == "cpp" and plan[5] == "w_xt_split"
    assert set(plan) <= {"cpp", "w_xt_split"}
    assert seconds[0] == cpp[1] and not broken(seconds)


def test_a_row_count_slower_than_a_larger_one_is_timed_again_with_its_choice():
    """At 2 rows the first timing of every candidate hit a hiccup: slower than 4 rows' step.
    It is timed again with 4 rows' choice among its candidates, and the second timing holds."""
    w_xt = rising(0.05, 2.0)
    recorded = {"cpp": flat(rising(0.05, 2.2)), "w_xt": flat(w_xt)}
    recorded["cpp"][2] = [0.0040, 0.00221]
    recorded["w_xt"][2] = [0.0041, 0.00211]
    time_steps, asked = replayed(recorded)
    tuned = ["w_xt"] * len(TUNED_ROWS)
    plan, seconds = run_steps(settle_steps(tuned, ("cpp",), time_steps))
    again = [rows for rows, _ in asked[len(TUNED_ROWS):]]
    assert again == [2]  # only the count that broke the rule
    assert plan[1] == "w_xt" and seconds[1] == pytest.approx(0.00211)
    assert not broken(seconds)


def test_a_row_count_takes_a_larger_counts_choice_when_that_is_faster_in_its_step():
    """At 3 rows the products picked "linear" and the step confirms it against "cpp", but the
    step with 4 rows' choice (w_xt_split, not a candidate at 3 rows) is faster: after the
    re-timing the plan at 3 rows is w_xt_split."""
    recorded = {"cpp": flat(rising(0.1, 3.0)), "w_xt_split": flat(rising(0.1, 2.0)),
                "linear": flat(rising(0.1, 2.8))}
    recorded["linear"][3] = [0.0031]
    recorded["cpp"][3] = [0.0033]
    time_steps, asked = replayed(recorded)
    tuned = ["w_xt_split"] * len(TUNED_ROWS)
    tuned[2] = "linear"
    plan, seconds = run_steps(settle_steps(tuned, ("cpp",), time_steps))
    assert (3, ("linear", "cpp", "w_xt_split")) in asked
    assert plan[2] == "w_xt_split" and not broken(seconds)


def test_re_timing_is_bounded_and_what_stays_broken_is_said():
    """A count whose every candidate stays slower than a larger count's (the machine, not the
    plan) is timed again RETIMES times, then left as measured and named by `broken`."""
    steps = rising(0.01, 1.0)
    steps[1] = 0.0015  # 1 row: always slower than 2 rows
    time_steps, asked = replayed({"cpp": flat(steps)})
    plan, seconds = run_steps(settle_steps(["cpp"] * len(TUNED_ROWS), (), time_steps))
    assert [rows for rows, _ in asked[len(TUNED_ROWS):]] == [1] * RETIMES
    assert broken(seconds) == [1]


@pytest.mark.parametrize("preset", ["tiny", "mini", "small", "draft"])
def test_settled_plans_are_monotonic_for_every_lesson_preset(preset):
    """Recorded shapes of each lesson preset's step (a flat memory-bound floor, rising past the
    ridge), with a slow path at a random few row counts: the settled plan has none left."""
    import random

    gen = random.Random(preset)
    floor = {"tiny": 0.7, "mini": 4.0, "small": 15.0, "draft": 0.4}[preset]
    good = {rows: (floor + 0.2 * max(0, rows - 8) * floor / 10) / 1000 for rows in TUNED_ROWS}
    bad = dict(good)
    for rows in gen.sample(TUNED_ROWS[:-1], 4):
        bad[rows] = good[rows] * 1.6
    time_steps, _ = replayed({"w_xt_split": flat(bad), "cpp": flat(good)})
    plan, seconds = run_steps(settle_steps(["w_xt_split"] * len(TUNED_ROWS), ("cpp",),
                                           time_steps))
    assert not broken(seconds)
    assert all(a <= b for a, b in zip(seconds, seconds[1:]))


def test_a_count_the_engine_cannot_run_gives_no_plan():
    """A pool too small for 64 rows: nothing is settled (the caller keeps the products' plan)."""
    def time_steps(rows, variants):
        return None if rows > 32 else dict.fromkeys(variants, rows / 1000)

    assert run_steps(settle_steps(["cpp"] * len(TUNED_ROWS), (), time_steps)) is None


def test_fastest_and_faster_larger():
    assert fastest({"w_xt": 1.0, "cpp": 1.0}) == "cpp"
    assert fastest({"w_xt": 0.9, "cpp": 1.0}) == "w_xt"
    times = [{"a": 3.0}, {"a": 2.0}, {"a": 2.5}]
    assert faster_larger(times, 0) == 1 and faster_larger(times, 1) is None


def test_a_step_within_the_timings_noise_of_a_larger_ones_is_not_timed_again():
    """A flat memory-bound stretch: 1 row measured 2% over 2 rows is noise, not a slow path;
    over SLACK it is timed again."""
    steps = rising(0.0, 1.0)
    steps[1] = 0.001 * (1 + (SLACK - 1) * 0.7)
    time_steps, asked = replayed({"cpp": flat(steps)})
    plan, seconds = run_steps(settle_steps(["cpp"] * len(TUNED_ROWS), (), time_steps))
    assert len(asked) == len(TUNED_ROWS) and not broken(seconds)
    steps[1] = 0.001 * SLACK * 1.01
    time_steps, asked = replayed({"cpp": flat(steps)})
    run_steps(settle_steps(["cpp"] * len(TUNED_ROWS), (), time_steps))
    assert len(asked) == len(TUNED_ROWS) + RETIMES
