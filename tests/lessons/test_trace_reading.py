"""Reading a run's trace in words: percentile rows, per-request latencies, and the causes of a
slow request, on hand-built traces whose answers are known."""

from __future__ import annotations

import dataclasses

import pytest

from engine.lab.results import (
    Percentiles,
    RequestRecord,
    RunMetrics,
    SchedulerSettings,
    ServedRun,
    StepRecord,
)
from lessons.trace_reading import (
    STAT_COLUMNS,
    explain_request,
    fmt_ms,
    percentile_rows,
    request_latencies,
    slowest,
)

NONE = Percentiles(None, None, None, None, None, None)


def request(rid, arrival, admitted, tokens, prompt=16, size="short"):
    return RequestRecord(id=rid, arrival_s=arrival, admitted_s=admitted, first_token_s=tokens[0],
                         finish_s=tokens[-1], prompt_len=prompt, output_len=len(tokens),
                         token_s=tokens, preemptions=0, size=size)


def step(start, end, prefill=0, decode=(), running=1):
    return StepRecord(index=0, start_s=start, end_s=end, prefill_tokens=prefill,
                      decode_seqs=len(decode), kv_blocks_used=0, running=running,
                      padding_rows=0, decode_ids=list(decode), prefill_chunks=[],
                      admitted_ids=[], preempted_ids=[], finished_ids=[])


def metrics(**summaries) -> RunMetrics:
    """A run's metrics with the given Percentiles, the rest empty."""
    fields = {name: NONE for name in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms", "queue_ms")}
    return RunMetrics(**{**fields, **summaries}, throughput_tok_s=None, requests_per_s=None,
                      goodput_rps=None, completed=0, output_tokens=0, duration_s=None,
                      slo_ttft_ms=None, slo_tpot_ms=None, requests_meeting_slo=None,
                      preemptions=0, slot_use=None)


def served_run(requests, max_batch, steps=()) -> ServedRun:
    """A hand-built trace: what explain_request and the tables read of a run."""
    config = SchedulerSettings(policy="continuous", max_batch=max_batch, timeout_ms=0.0,
                               chunk_size=0, max_tokens_per_step=None, token_budget=None)
    return ServedRun(device="cpu", preset="tiny", weights="trained", policy="continuous",
                     config=config, cancelled=False, kv_blocks_total=64, block_size=16,
                     requests=list(requests), steps=list(steps), metrics=metrics(),
                     spread=None, check=None)  # hand-built: nothing timed, nothing checked


def test_a_request_that_queued_is_explained_by_its_wait():
    quick = [request(i, 0.0, 0.0, [0.01 * k for k in range(1, 5)]) for i in range(3)]
    late = request(9, 0.0, 0.5, [0.51, 0.52, 0.53, 0.54])
    run = served_run(quick + [late], 3, [step(0.0, 0.05, running=3)])
    why = explain_request(run, 9)
    assert why[0].startswith("waited 500 ms in the queue") and "3 of 3 batch slots" in why[0]


def test_a_long_answer_and_a_prefill_stall_are_named():
    base = [request(i, 0.0, 0.0, [0.01, 0.02, 0.03]) for i in range(4)]
    tokens = [0.01 * k for k in range(1, 40)]
    tokens[20:] = [t + 0.2 for t in tokens[20:]]  # one 210 ms gap
    slow = request(7, 0.0, 0.0, tokens, prompt=16, size="long")
    stall = step(0.2, 0.41, prefill=300, decode=[7], running=2)
    run = served_run(base + [slow], 8, [stall])
    why = " | ".join(explain_request(run, 7))
    assert "a long answer: 39 tokens" in why
    assert "also read other requests' prompts (300 tokens)" in why and "worst gap was 210 ms" in why


def test_nothing_special_still_gets_an_answer():
    run = served_run([request(i, 0.0, 0.0, [0.01, 0.02]) for i in range(3)], 8)
    assert explain_request(run, 1) == [
        "no single cause stands out: it met a busy server at an unlucky moment"]


def test_latencies_slowest_and_table_rows():
    reqs = [request(0, 0.0, 0.0, [0.1, 0.2]), request(1, 0.5, 0.6, [0.9, 1.5]),
            dataclasses.replace(request(2, 0.0, 0.0, [0.1]), finish_s=None)]  # unfinished: out
    run = served_run(reqs, 2)
    rows = request_latencies(run)
    assert [r.id for r in rows] == [0, 1]
    assert rows[1].queue_ms == pytest.approx(100.0)
    assert rows[1].e2e_ms == pytest.approx(1000.0)
    assert rows[1].ttft_ms == pytest.approx(400.0)
    top = slowest(run, 1)
    assert top[0].id == 1 and top[0].why
    summary = Percentiles(p50=1.0, mean=2.0, p90=3.0, p95=4.0, p99=150.0, max=None, count=7)
    table = percentile_rows(metrics(ttft_ms=summary))  # no run: the figures and their count
    assert table[0] == ("TTFT (to first token)", "1.0", "2.0", "3.0", "4.0", "150", "\u2013",
                        "7")
    # with the run: each figure with its interval from the run's requests, and their count
    ttft = percentile_rows(run.metrics, run)[0]
    assert ttft[-1] == "2 requests" and len(ttft) == 1 + len(STAT_COLUMNS)
    assert fmt_ms(1234.4) == "1,234" and fmt_ms(12.34) == "12.3"
