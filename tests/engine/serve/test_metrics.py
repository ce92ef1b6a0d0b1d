"""Metric definitions on hand-made timelines, where every value is known exactly."""

from __future__ import annotations

import json

import numpy as np
import pytest

from engine.serve.metrics import compute_metrics, e2e_ms, slot_use, summarize, tpot_ms, ttft_ms
from engine.serve.trace import RequestTrace, StepTrace


def request(id, arrival, admitted, tokens, prompt_len=10):
    return RequestTrace(id=id, arrival_s=arrival, prompt_len=prompt_len, output_len=len(tokens),
                        admitted_s=admitted, first_token_s=tokens[0] if tokens else None,
                        finish_s=tokens[-1] if tokens else None, token_s=list(tokens))


@pytest.fixture
def timeline():
    """r0: arrives at 0, admitted at 0.1, tokens at 0.5, 0.7, 1.0.
    r1: arrives at 0.2, admitted at once, one token at 0.4 (no TPOT, no ITL)."""
    return [request(0, 0.0, 0.1, [0.5, 0.7, 1.0]), request(1, 0.2, 0.2, [0.4])]


def test_latency_definitions(timeline):
    m = compute_metrics(timeline)
    assert m.ttft_ms.mean == pytest.approx(350) and m.ttft_ms.max == pytest.approx(500)
    assert m.ttft_ms.p50 == pytest.approx(350)
    assert m.ttft_ms.p90 == pytest.approx(200 + 0.9 * 300)  # linear interpolation
    # TPOT excludes the first token: (1.0 - 0.5) / 2; the one-token request has none.
    assert m.tpot_ms.count == 1 and m.tpot_ms.mean == pytest.approx(250)
    # ITL: every gap, pooled.
    assert m.itl_ms.count == 2 and m.itl_ms.mean == pytest.approx(250)
    assert m.itl_ms.p99 == pytest.approx(200 + 0.99 * 100) and m.itl_ms.max == pytest.approx(300)
    assert m.e2e_ms.mean == pytest.approx(600) and m.e2e_ms.max == pytest.approx(1000)
    assert m.queue_ms.mean == pytest.approx(50) and m.queue_ms.max == pytest.approx(100)
    r0 = timeline[0]  # E2E = TTFT + (N - 1) x TPOT
    assert e2e_ms(r0) == pytest.approx(ttft_ms(r0) + 2 * tpot_ms(r0))


def test_rates_over_first_arrival_to_last_finish(timeline):
    m = compute_metrics(timeline)
    assert m.duration_s == pytest.approx(1.0)
    assert m.output_tokens == 4 and m.throughput_tok_s == pytest.approx(4.0)
    assert m.requests_per_s == pytest.approx(2.0)
    shifted = [request(0, 2.0, 2.0, [2.5, 3.0]), request(1, 2.5, 2.5, [3.0, 4.0])]
    m = compute_metrics(shifted)
    assert m.duration_s == pytest.approx(2.0) and m.throughput_tok_s == pytest.approx(2.0)


def test_goodput_counts_requests_meeting_every_slo(timeline):
    assert compute_metrics(timeline).goodput_rps is None  # no SLO: undefined
    m = compute_metrics(timeline, slo_ttft_ms=300)
    assert m.requests_meeting_slo == 1 and m.goodput_rps == pytest.approx(1.0)  # r1 only
    m = compute_metrics(timeline, slo_tpot_ms=100)  # r0 fails TPOT; r1 has one token: meets it
    assert m.requests_meeting_slo == 1
    m = compute_metrics(timeline, slo_ttft_ms=600, slo_tpot_ms=250)  # limits are inclusive
    assert m.requests_meeting_slo == 2 and m.goodput_rps == pytest.approx(2.0)
    m = compute_metrics(timeline, slo_ttft_ms=300, slo_tpot_ms=1000)
    assert m.requests_meeting_slo == 1


def test_percentiles_are_numpy_linear():
    values = [3.0, 1.0, 4.0, 1.5, 9.0, 2.6, 5.0]
    s = summarize(values)
    for q, got in zip((50, 90, 95, 99), (s.p50, s.p90, s.p95, s.p99), strict=True):
        assert got == pytest.approx(float(np.percentile(values, q)))
    assert summarize([1, 2, 3, 4]).p50 == pytest.approx(2.5)
    assert summarize([1, 2, 3, 4]).p90 == pytest.approx(3.7)
    assert s.max == 9.0 and s.count == 7


def test_empty_inputs_give_none_not_errors():
    s = summarize([])
    assert (s.mean, s.p50, s.p99, s.max, s.count) == (None, None, None, None, 0)
    m = compute_metrics([], steps=[], max_batch=8, slo_ttft_ms=100)
    assert m.ttft_ms.mean is None and m.itl_ms.p99 is None
    assert m.throughput_tok_s is None and m.requests_per_s is None and m.goodput_rps is None
    assert m.slot_use is None and m.completed == 0
    json.dumps(m.to_json(), allow_nan=False)


def test_unfinished_requests_are_left_out(timeline):
    unfinished = RequestTrace(id=2, arrival_s=0.0, prompt_len=5, output_len=10,
                              admitted_s=0.1, first_token_s=0.3, token_s=[0.3, 0.35])
    never_admitted = RequestTrace(id=3, arrival_s=0.0, prompt_len=5, output_len=10)
    m = compute_metrics(timeline + [unfinished, never_admitted])
    assert m.completed == 2 and m.ttft_ms.mean == pytest.approx(350)
    assert m.output_tokens == 4


def test_slot_use_is_time_weighted():
    steps = [StepTrace(0, 0.0, 1.0, 0, 4, 0, running=4), StepTrace(1, 2.0, 5.0, 0, 8, 0, running=8)]
    assert slot_use(steps, 8) == pytest.approx((4 * 1 + 8 * 3) / (8 * 4))
    assert slot_use([], 8) is None


def test_preemptions_are_summed(timeline):
    timeline[0].preemptions = 2
    assert compute_metrics(timeline).preemptions == 2
    json.dumps(compute_metrics(timeline).to_json(), allow_nan=False)


def test_tpot_has_n_minus_1_gaps_the_lessons_worked_example():
    """Lesson 1's checkpoint: TTFT 200 ms, 101 tokens 20 ms apart: 100 gaps, E2E 2,200 ms."""
    tokens = [0.2 + 0.02 * i for i in range(101)]
    r = request(0, 0.0, 0.0, tokens)
    assert ttft_ms(r) == pytest.approx(200) and tpot_ms(r) == pytest.approx(20)
    assert e2e_ms(r) == pytest.approx(200 + (101 - 1) * 20)  # not 200 + 101 x 20 = 2,220


def test_per_user_speed_is_1000_over_tpot_so_a_stall_counts():
    """Ten gaps of 10 ms and one of 1,000 ms: the median gap (10 ms) says 100 tokens/s, but
    the reader waited (1,100 / 11) = 100 ms per token on average: 10 tokens/s."""
    from engine.calc.slo_math import per_user_tokens_per_s
    from engine.lab.jobs.generation import reader_metrics

    gaps = [0.01] * 5 + [1.0] + [0.01] * 5
    tokens = [0.1]
    for g in gaps:
        tokens.append(tokens[-1] + g)
    r = request(0, 0.0, 0.0, tokens)
    assert tpot_ms(r) == pytest.approx(100)
    assert per_user_tokens_per_s(tpot_ms(r)) == pytest.approx(10)
    assert reader_metrics(r)["user_tokens_per_s"] == pytest.approx(10)
    assert reader_metrics(r)["itl_ms"]["p50"] == pytest.approx(10)  # what the median would say
    assert per_user_tokens_per_s(None) is None
