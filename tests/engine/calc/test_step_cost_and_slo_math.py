"""The roofline's formulas (engine.calc.step_cost) against the sweep's own counts, and the SLO and cost
arithmetic (engine.calc.slo_math)."""

from __future__ import annotations

import pytest

from engine.calc.slo_math import (
    CHAT,
    CHAT_SOURCES,
    SLO,
    judge,
    meets_slo,
)
from engine.calc.step_cost import (
    decode_context,
    decode_cost,
    prefill_cost,
    ridge_point,
    roof_gflops,
)
from engine.config import PRESETS
from engine.serve import metrics
from engine.serve.trace import RequestTrace
from engine.sweep import measure_point


def tiny_shape(engine) -> dict:
    return {**engine.model_config.describe(engine.device),
            "weight_bytes": engine.model.weight_bytes()}


def test_decode_cost_matches_the_sweeps_counts(engine):
    point = measure_point(engine, batch_size=2, prompt_len=16, new_tokens=6)
    cost = decode_cost(tiny_shape(engine), 2, decode_context(16, 6))
    assert cost.flops == pytest.approx(point.flops_per_step)
    assert cost.bytes == pytest.approx(point.bytes_per_step, rel=1e-6)


def test_decode_intensity_is_about_half_the_batch_in_fp32():
    shape = PRESETS["small"].describe("cpu")
    for batch in (1, 4, 16):
        assert decode_cost(shape, batch, 1).intensity == pytest.approx(batch / 2, rel=0.02)


def test_prefill_reuses_weights_and_grows_with_the_square_of_length():
    shape = PRESETS["small"].describe("cpu")
    short, long = prefill_cost(shape, 64), prefill_cost(shape, 1024)
    assert long.intensity > 10 * short.intensity
    embedding = shape["vocab"] * shape["hidden"]
    linear = 2 * 1024 * (shape["params"] - embedding) + 2 * embedding
    attention = 4 * (1024 * 1025 / 2) * shape["heads"] * shape["head_dim"] * shape["layers"]
    assert long.flops == pytest.approx(linear + attention)
    assert long.bytes == shape["weight_bytes"] + 1024 * shape["kv_bytes_per_token"]


def test_roof_and_floor():
    assert roof_gflops(1.0, 30, 180) == 30 and roof_gflops(100, 30, 180) == 180
    assert ridge_point(30, 180) == 6
    cost = decode_cost(PRESETS["small"].describe("cpu"), 1, 100)
    assert cost.floor_ms(30) == pytest.approx(1000 * cost.bytes / 30e9)
    assert cost.floor_ms(30, 1e-6) == pytest.approx(1000 * cost.flops / 1e3)  # compute-bound


def point(ttft, tpot, e2e, outputs, duration=10.0):
    return {"ttft_ms": ttft, "tpot_ms": tpot, "e2e_ms": e2e, "output_len": outputs,
            "duration_s": duration}


def test_goodput_and_attainment_count_requests_within_every_limit():
    """Worked example: limits TTFT <= 1,000 ms, TPOT <= 50 ms. Request 1 misses TTFT (2,000),
    request 2 misses TPOT (60), request 3 has one token (no TPOT: meets any TPOT limit)."""
    p = point([100, 2000, 200, 250], [10, 10, 60, None], [900, 3000, 4000, 250], [50, 50, 50, 1])
    j = judge(p, SLO(ttft_ms=1000, tpot_ms=50))
    assert j.completed == 4 and j.good == 2
    assert j.attainment == pytest.approx(0.5)  # 2 of 4 requests met both limits
    assert j.goodput_rps == pytest.approx(0.2) and j.requests_per_s == pytest.approx(0.4)
    assert j.goodput_tok_s == pytest.approx(5.1) and j.throughput_tok_s == pytest.approx(15.1)
    assert dict(j.met_each) == {"TTFT": 3, "TPOT": 3}  # each limit alone: 75%, both: 50%
    checks = {what: (value, met) for what, value, _limit, met in j.checks}
    assert checks["P50 TTFT"] == (pytest.approx(225), True)
    assert checks["P99 TTFT"][1] is False and checks["P50 TPOT"] == (pytest.approx(10), True)
    assert set(checks) == {"P50 TTFT", "P99 TTFT", "P50 TPOT", "P99 TPOT"}
    assert not j.all_checks_met


def test_attainment_can_be_lower_than_every_percentile_says():
    """P50 TTFT and P50 TPOT both within their limits, yet no request meets both."""
    p = point([100, 100, 900, 900], [90, 90, 10, 10], [1, 1, 1, 1], [8, 8, 8, 8])
    j = judge(p, SLO(ttft_ms=500, tpot_ms=50))
    assert {w: met for w, _v, _l, met in j.checks}["P50 TTFT"] is True
    assert {w: met for w, _v, _l, met in j.checks}["P50 TPOT"] is True
    assert j.good == 0 and j.attainment == 0  # every request misses one of the two


def test_an_e2e_limit_is_optional():
    p = point([100], [10], [9000], [64])
    assert judge(p, SLO(ttft_ms=200, tpot_ms=50)).good == 1
    assert judge(p, SLO(ttft_ms=200, tpot_ms=50, e2e_ms=8000)).good == 0


def test_no_limits_means_goodput_is_throughput():
    p = point([5000], [500], [60000], [64])
    j = judge(p, SLO())
    assert j.good == 1 and j.checks == () and j.all_checks_met and j.attainment == 1
    assert SLO().empty and not CHAT.empty
    assert {name for name, _ in CHAT_SOURCES} == {"TTFT 200 ms", "TPOT 100 ms"}
    assert (CHAT.ttft_ms, CHAT.tpot_ms) == (200, 100)


def test_goodput_is_judged_by_one_definition_in_the_run_metrics_and_the_pages():
    """serve.metrics (a run's --slo-ttft-ms/--slo-tpot-ms) and the pages' SLO.met both judge a
    request with meets_slo: the same answers for the same limits."""
    traces = [RequestTrace(0, 0.0, 4, 3, first_token_s=0.2, token_s=[0.2, 0.25, 0.3]),
              RequestTrace(1, 0.0, 4, 1, first_token_s=0.9, token_s=[0.9]),
              RequestTrace(2, 0.1, 4, 2, first_token_s=0.3, token_s=[0.3, 0.5])]
    for ttft, tpot in [(None, None), (250, None), (None, 60), (250, 60), (1000, 10)]:
        for r in traces:
            by_run = metrics.meets_slo(r, ttft, tpot)
            by_page = SLO(ttft_ms=ttft, tpot_ms=tpot).met(metrics.ttft_ms(r), metrics.tpot_ms(r),
                                                          metrics.e2e_ms(r))
            assert by_run == by_page == meets_slo(metrics.ttft_ms(r), metrics.tpot_ms(r),
                                                  ttft_limit_ms=ttft, tpot_limit_ms=tpot)
    assert not meets_slo(10, 5, 900, e2e_limit_ms=800)
