"""Lesson 15 without a browser: the one job it asks for, the table of the three arms with how
each was measured, the prediction's verdict from the ITL P99, the goodput question on the
reader's run and the download, on a planted result of the job's shape."""

from __future__ import annotations

import panel as pn
from lesson_stubs import attach, downloaded, said

from engine.lab.results import DisaggregationResult
from lessons.disaggregation import DisaggregationLesson, itl_outcome, rows_of
from widgets.tables import sig

SLO = {"slo_ttft_ms": 1000.0, "slo_tpot_ms": 100.0}


def percentiles(p50: float, p99: float) -> dict:
    return {"mean": p50, "p50": p50, "p90": p99, "p95": p99, "p99": p99, "max": p99, "count": 4}


def arm(name: str, how: str, ttft: tuple, itl99: float, goodput: float, met: int,
        handover: float | None) -> dict:
    metrics = {"ttft_ms": percentiles(*ttft), "tpot_ms": percentiles(30.0, 60.0),
               "itl_ms": percentiles(25.0, itl99), "e2e_ms": percentiles(900.0, 2000.0),
               "queue_ms": percentiles(5.0, 50.0), "throughput_tok_s": 80.0,
               "requests_per_s": 1.6, "goodput_rps": goodput, "completed": 4,
               "output_tokens": 96, "duration_s": 2.5, **SLO, "requests_meeting_slo": met,
               "preemptions": 0, "slot_use": None}
    requests = [{"id": i, "size": "long" if i == 2 else "short", "prompt_len": 600 if i == 2
                 else 40, "ttft_ms": ttft[0] + i, "itl_max_ms": itl99,
                 "handover_ms": handover} for i in range(4)]
    return {"arm": name, "how": how, "label": how, "chunk_size": 64 if name == "chunked" else 0,
            "metrics": metrics, "requests": requests}


RESULT = {
    "device": "cpu", "preset": "tiny", "weights": "trained", "max_batch": 8,
    "kv_bytes_per_token": 3072,
    "workload": {"kind": "poisson mix", "rate": 2.0, "requests": 4, "long_share": 0.25,
                 "short_prompt": [16, 64], "short_output": [16, 32], "long_prompt": [512, 768],
                 "long_output": [16, 32], "seed": 0, "users": 0},
    "arms": [arm("colocated", "measured live", (120.0, 900.0), 400.0, 0.8, 2, None),
             arm("chunked", "measured live", (150.0, 700.0), 120.0, 1.2, 3, None),
             arm("disaggregated", "computed from measured step costs (replay)", (110.0, 650.0), 45.0, 1.6, 4,
                 0.7)],
    "costs": {}, "spread": None, "check": None,
}


def lesson(args=None):
    page = DisaggregationLesson.from_url(args or {})
    service = attach(page)
    pn.panel(page).get_root()
    service.submitted = [j for j in service.submitted if j.kind != "info"]  # the GPU box's
    return page, service


def test_one_job_at_the_readers_settings():
    page, service = lesson({"requests": [b"4"], "rate": [b"3"], "slo_tpot_ms": [b"80"]})
    (job,) = service.submitted
    assert job.kind == "disaggregation"
    assert job.params["rate"] == 3.0 and job.params["slo_tpot_ms"] == 80.0
    assert job.params["requests"] == 4
    assert DisaggregationLesson.warm_jobs() == [("disaggregation", {"requests": 16, "rate": 2.0, **SLO})]


def test_the_table_the_verdict_the_prediction_and_the_question_follow_the_result():
    page, service = lesson()
    (job,) = service.submitted
    service.finish(job, RESULT)
    rows = rows_of(page.result)
    assert [r.arm for r in rows] == ["colocated", "chunked", "disaggregated"]
    table = page.table.object
    assert table.count("<tr>") == 1 + 3
    assert "computed from measured step costs (replay)" in table and "measured live" in table
    for r in rows:
        assert sig(r.itl_p99_ms) in table and sig(r.goodput_rps) in table
    assert "100% of 4" in table and "50% of 4" in table  # disaggregated met 4, colocated 2
    assert "computed from measured step costs (replay)" in page.verdict.object
    assert "lowest ITL P99:** disaggregated" in page.verdict.object
    # every planted handover is 0.7 ms, short and long prompts alike: a flat line
    assert "The handover:** 0.700 ms + 0 us per prompt token" in page.verdict.object
    assert "over the 4 requests; 3,072 bytes of KV per token" in page.verdict.object
    choice, detail = itl_outcome(rows)
    assert choice.startswith("Lower")  # 45 ms against chunked's 120 ms
    assert f"Measured: {choice} ({detail})" in page.prediction_box.verdict
    asked = page.checkpoint.questions[-1].question
    assert asked.answer.text == "disaggregated"
    assert any("disaggregated ITL P99 45.0 ms" in (s or "") for s in said(page)), said(page)
    header, rows_out = downloaded(page.download)
    assert len(rows_out) == 3 * 4
    assert {r["how"] for r in rows_out} == {"measured live", "computed from measured step costs (replay)"}
    assert [r["handover_ms"] for r in rows_out if r["serving"] == "disaggregated"] == [0.7] * 4


def test_the_same_itl_tail_reads_as_about_the_same():
    same = {**RESULT, "arms": [RESULT["arms"][0], RESULT["arms"][1],
                               arm("disaggregated", "measured live", (110.0, 650.0), 125.0, 1.2,
                                   3, 0.7)]}
    choice, _ = itl_outcome(rows_of(DisaggregationResult.from_dict(same)))
    assert choice == "About the same"


def test_the_status_line_says_a_replay_is_computed_not_measured_live():
    page, service = lesson()
    (job,) = service.submitted
    service.finish(job, RESULT)
    line = page.runner.status.label_line
    assert "the disaggregated run computed from measured step costs (replay)" in line, line
    assert not line.startswith("measured live"), line
    assert any("computed from measured step costs (replay)" in (s or "") for s in said(page))


def test_the_status_line_of_an_all_live_result_says_measured_live():
    live = {**RESULT, "arms": [RESULT["arms"][0], RESULT["arms"][1],
                               arm("disaggregated", "measured live", (110.0, 650.0), 45.0, 1.6,
                                   4, 0.7)]}
    page, service = lesson()
    (job,) = service.submitted
    service.finish(job, live)
    line = page.runner.status.label_line
    assert line.startswith("measured live"), line
    assert "replay" not in line
