"""Reading a run's trace in words: percentile rows, per-request latencies, and the causes of a
slow request, on hand-built traces whose answers are known."""

from __future__ import annotations

import pytest

from lessons.trace_reading import (
    explain_request,
    fmt_ms,
    percentile_rows,
    request_latencies,
    slowest,
)


def request(rid, arrival, admitted, tokens, prompt=16, size="short"):
    return {"id": rid, "arrival_s": arrival, "admitted_s": admitted, "first_token_s": tokens[0],
            "finish_s": tokens[-1], "prompt_len": prompt, "output_len": len(tokens),
            "token_s": tokens, "preemptions": 0, "size": size}


def step(start, end, prefill=0, decode=(), running=1):
    return {"start_s": start, "end_s": end, "prefill_tokens": prefill,
            "decode_seqs": len(decode), "decode_ids": list(decode), "running": running}


def test_a_request_that_queued_is_explained_by_its_wait():
    quick = [request(i, 0.0, 0.0, [0.01 * k for k in range(1, 5)]) for i in range(3)]
    late = request(9, 0.0, 0.5, [0.51, 0.52, 0.53, 0.54])
    run = {"requests": quick + [late], "config": {"max_batch": 3},
           "steps": [step(0.0, 0.05, running=3)]}
    why = explain_request(run, 9)
    assert why[0].startswith("waited 500 ms in the queue") and "3 of 3 batch slots" in why[0]


def test_a_long_answer_and_a_prefill_stall_are_named():
    base = [request(i, 0.0, 0.0, [0.01, 0.02, 0.03]) for i in range(4)]
    tokens = [0.01 * k for k in range(1, 40)]
    tokens[20:] = [t + 0.2 for t in tokens[20:]]  # one 210 ms gap
    slow = request(7, 0.0, 0.0, tokens, prompt=16, size="long")
    stall = step(0.2, 0.41, prefill=300, decode=[7], running=2)
    run = {"requests": base + [slow], "config": {"max_batch": 8}, "steps": [stall]}
    why = " | ".join(explain_request(run, 7))
    assert "a long answer: 39 tokens" in why
    assert "also read other requests' prompts (300 tokens)" in why and "worst gap was 210 ms" in why


def test_nothing_special_still_gets_an_answer():
    run = {"requests": [request(i, 0.0, 0.0, [0.01, 0.02]) for i in range(3)],
           "config": {"max_batch": 8}, "steps": []}
    assert explain_request(run, 1) == [
        "no single cause stands out: it met a busy server at an unlucky moment"]


def test_latencies_slowest_and_table_rows():
    reqs = [request(0, 0.0, 0.0, [0.1, 0.2]), request(1, 0.5, 0.6, [0.9, 1.5]),
            {**request(2, 0.0, 0.0, [0.1]), "finish_s": None}]  # unfinished: left out
    run = {"requests": reqs, "config": {"max_batch": 2}, "steps": []}
    rows = request_latencies(run)
    assert [r["id"] for r in rows] == [0, 1]
    assert rows[1]["queue_ms"] == pytest.approx(100.0)
    assert rows[1]["e2e_ms"] == pytest.approx(1000.0)
    assert rows[1]["ttft_ms"] == pytest.approx(400.0)
    top = slowest(run, 1)
    assert top[0]["id"] == 1 and top[0]["why"]
    summary = {"p50": 1.0, "mean": 2.0, "p90": 3.0, "p95": 4.0, "p99": 150.0, "max": None}
    table = percentile_rows({"ttft_ms": summary})
    assert table[0] == ("TTFT (to first token)", "1.0", "2.0", "3.0", "4.0", "150", "\u2013")
    assert fmt_ms(1234.4) == "1,234" and fmt_ms(12.34) == "12.3"
