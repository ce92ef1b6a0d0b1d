"""Lesson 2 without a browser: a small load test run for real in this process (the page's job
with short requests), drawn as
histograms with markers, a percentile table, the slowest requests and the quoted targets."""

from __future__ import annotations

import dataclasses
import re

import panel as pn
import pytest
from lesson_stubs import DEVICE, WHEN, attach, downloaded

from engine.lab import worker
from engine.lab.results import Percentiles
from lessons.average_lies import AverageLiesLesson, tail_sentence
from lessons.trace_reading import percentile_rows
from widgets.latency_histogram import histogram
from widgets.tables import sig


@pytest.fixture(scope="module")
def shown():
    pn.state.reset()
    page = AverageLiesLesson.from_url({"requests": [b"10"], "rate": [b"30"],
                                       "long_share": [b"0.3"]})
    service = attach(page)
    pn.panel(page).get_root()  # drawn: the page starts its load test, as on load in a browser
    page.button.clicks += 1
    on_load, job = [j for j in service.submitted if j.kind != "info"]
    assert service.cancelled == [on_load] and on_load.params == job.params
    # the page's own job, with shorter requests than a reader's so the test stays quick
    small = {**job.params, "short_prompt": [8, 16], "short_output": [2, 6],
             "long_prompt": [48, 64], "long_output": [12, 16]}
    result = worker.run("load_test", small, lambda t, d: service.send(job, t, d), lambda: False)
    service.finish(job, result)
    return page, job, result


def test_the_button_runs_the_load_test_with_the_pages_settings(shown):
    page, job, _ = shown
    assert job.kind == "load_test" and job.use_cache
    assert (job.params["requests"], job.params["rate"], job.params["long_share"]) == (10, 30.0, 0.3)
    assert not page.button.disabled


def test_pressing_run_during_a_run_replaces_it():
    page = AverageLiesLesson.from_url({"requests": [b"10"]})
    service = attach(page)
    pn.panel(page).get_root()
    page.button.clicks += 1
    assert not page.button.disabled  # usable while the first test runs
    page.requests = 20
    page.button.clicks += 1
    on_load, first, second = [j for j in service.submitted if j.kind != "info"]
    assert service.cancelled == [on_load, first] and second.params["requests"] == 20


def test_histograms_hold_every_request_with_the_runs_markers(shown):
    page, _, result = shown
    m = result["metrics"]
    assert page.e2e.count == m["completed"] == 10 and page.ttft.count == 10
    e2e = dict(zip(page.e2e.marks.data["name"], page.e2e.marks.data["x"]))
    assert e2e["p50"] == pytest.approx(m["e2e_ms"]["p50"])
    assert e2e["p99"] == pytest.approx(m["e2e_ms"]["p99"]) and e2e["p99"] >= e2e["p50"]


def test_tables_and_words(shown):
    page, _, _ = shown
    table = page.table.object
    assert "Percentiles over 10 requests" in table and "P99" in table and "E2E" in table
    assert "10 requests</td>" in table and "gaps of 10 requests</td>" in table  # samples column


def test_each_percentile_carries_its_interval_and_a_p99_of_10_requests_is_marked(shown):
    page, _, result = shown
    run = page.result
    rows = {r[0]: r for r in percentile_rows(run.metrics, run)}
    ttft = rows["TTFT (to first token)"]  # label, P50, mean, P90, P95, P99, max, samples
    p50, lo, hi = re.fullmatch(r"([\d.,]+) \[([\d.,]+)\u2013([\d.,]+)\]", ttft[1]).groups()
    assert float(lo.replace(",", "")) <= float(p50.replace(",", "")) <= float(hi.replace(",", ""))
    assert sig(result["metrics"]["ttft_ms"]["p50"]) == p50  # the engine's own figure
    assert ttft[5].endswith("\u2020") and ttft[4].endswith("\u2020")  # P99 and P95 of 10
    assert ttft[3].endswith("]")  # a P90 of 10 requests is bounded
    assert ttft[7] == "10 requests"
    slow = page.slow.object
    assert slow.count("<tr>") == 6 and "why it was slow" in slow  # header + five requests
    assert "median request took" in page.tail_text.object
    assert "quoted example" in page.targets.object and "TPOT P99" in page.targets.object
    assert f"tiny preset (trained weights) on {DEVICE}" in page.measured_on.object


def test_the_prediction_and_the_question_on_your_run_follow_its_numbers(shown):
    page, _, run = shown
    e2e = run["metrics"]["e2e_ms"]
    above = e2e["mean"] > e2e["p50"]
    verdict = page.prediction_box.verdict
    assert verdict.startswith("Measured:")  # the helper skipped the prediction
    asked = page.checkpoint.questions[-1].question
    assert asked.prompt.startswith("In your load test")
    assert asked.answer.text.startswith("Above" if above else "Below") or \
        asked.answer.text.startswith("On the median")
    assert f"{100 * (e2e['mean'] / e2e['p50'] - 1):+.0f}%" in asked.answer.why


def test_tail_sentence_without_data():
    empty = Percentiles(mean=None, p50=None, p90=None, p95=None, p99=None, max=None)
    assert tail_sentence(empty).startswith("Not enough")
    spread = dataclasses.replace(empty, p50=100.0, mean=120.0, p99=200.0)
    assert "2.0 times the median" in tail_sentence(spread)


def test_tail_sentence_quotes_the_p99_only_where_the_run_bounds_it():
    run = Percentiles(mean=120.0, p50=100.0, p90=140.0, p95=150.0, p99=200.0, max=210.0)
    few, many = dataclasses.replace(run, count=40), dataclasses.replace(run, count=100)
    assert "slowest 5% took 150" in tail_sentence(few) and "1%" not in tail_sentence(few)
    assert "slowest 1% took 200" in tail_sentence(many)


def test_warm_jobs_are_the_defaults():
    [(kind, params)] = AverageLiesLesson.warm_jobs()
    assert kind == "load_test" and params["requests"] == 40 and params["rate"] == 4.0


def test_the_download_holds_the_values_both_histograms_draw(shown):
    """Each request's TTFT and E2E: binned as the page bins them they give the bars drawn; the
    markers and the run's record in the header."""
    page, job, result = shown
    head, rows = downloaded(page.download)
    assert sorted(r["request"] for r in rows) == sorted(
        r["id"] for r in result["requests"] if r["finish_s"] is not None)
    for chart, key in ((page.e2e, "e2e_ms"), (page.ttft, "ttft_ms")):
        counts, edges = histogram([r[key] for r in rows], chart.bins)
        assert counts.tolist() == chart.bars.data["count"]
        assert edges[:-1].tolist() == chart.bars.data["left"]
    assert head["markers_ms"] == {"E2E": page.e2e.values, "TTFT": page.ttft.values}
    p50 = head["markers_interval"]["E2E"]["p50"]  # the band behind the P50 line
    assert p50["n"] == 10 and p50["ci_lo"] <= page.e2e.values["p50"] <= p50["ci_hi"]
    assert head["markers_interval"]["TTFT"]["p99"]["bounded"] is False  # 10 requests
    assert head["job"] == "load_test" and head["params"]["requests"] == 10
    assert all(job.params[k] == v for k, v in head["params"].items())  # as submitted
    assert head["device"] == DEVICE and head["measured"].startswith("fresh, measured")


def test_a_nearby_load_test_is_shown_until_the_readers_own_arrives(shown):
    _, job, result = shown
    page = AverageLiesLesson.from_url({"requests": [b"12"], "rate": [b"30"]})
    service = attach(page)
    pn.panel(page).get_root()
    (waiting,) = [j for j in service.submitted if j.kind != "info"]
    assert waiting.nearby
    near = {**job.params, "short_prompt": [8, 16]}
    service.send(waiting, "nearby", result, cached=True, device=DEVICE, measured_at=WHEN,
                 near=near)
    assert page.result is not None and page.table.object  # drawn at once
    assert "requests 10 (you asked for 12)" in page.runner.status.label_text
    assert page.runner.status.running  # the reader's own test still to come


def test_without_an_endpoint_the_url_cannot_pick_one():
    page = AverageLiesLesson.from_url({"source": [b"endpoint"]})
    assert page.source == "engine" and page.job()[0] == "load_test"


def test_the_teachers_endpoint_is_measured_over_http_and_labelled(endpoint_set):
    page = AverageLiesLesson.from_url({"requests": [b"10"], "rate": [b"30"],
                                       "source": [b"endpoint"]})
    service = attach(page)
    view = pn.panel(page)
    view.get_root()  # drawn: the page starts its load test, as on load in a browser
    [job] = [j for j in service.submitted if j.kind != "info"]
    assert job.kind == "endpoint_load_test"
    assert job.params["url"] == endpoint_set.url and job.params["model"] == "tiny"
    assert "max_batch" not in job.params and not page._batch_slider.visible
    small = {**job.params, "short_prompt": [8, 16], "short_output": [2, 6],
             "long_prompt": [48, 64], "long_output": [12, 16]}
    service.send(job, "started")
    result = worker.run(job.kind, small, lambda t, d: service.send(job, t, d), lambda: False)
    service.finish(job, result)
    assert page.e2e.count == 10
    host = endpoint_set.host
    assert f"tiny at {host}" in page.measured_on.object and "over HTTP" in page.measured_on.object
    assert "not visible from the client" in page.slow.object
    assert "median request took" in page.tail_text.object
    [choice] = [g for g in view.select(pn.widgets.RadioButtonGroup)  # the source, not the load
                if "Built-in engine" in g.options]
    assert list(choice.options) == ["Built-in engine", f"tiny at {host}"]
    head, rows = downloaded(page.download)  # the download names the endpoint's job
    assert head["job"] == "endpoint_load_test" and head["params"]["url"] == endpoint_set.url
    assert head["preset"] == "tiny" and len(rows) == 10


def test_closed_loop_is_offered_beside_open_loop_and_named_on_the_page():
    from lessons.average_lies import CLOSED, INTRO, OPEN

    assert "vocabulary#open-loop" in INTRO and "vocabulary#closed-loop" in INTRO
    page = AverageLiesLesson.from_url({"requests": [b"10"]})
    service = attach(page)
    pn.panel(page).get_root()
    assert page._load_widgets[OPEN].visible and not page._load_widgets[CLOSED].visible
    page.param.update(load=CLOSED, users=3)
    page.button.clicks += 1
    job = service.submitted[-1]
    assert job.kind == "load_test" and job.params["users"] == 3
    small = {**job.params, "short_prompt": [8, 16], "short_output": [2, 6],
             "long_prompt": [48, 64], "long_output": [12, 16]}
    result = worker.run("load_test", small, lambda t, d: service.send(job, t, d), lambda: False)
    service.finish(job, result)
    assert "Closed loop of 3 concurrent users: 10 requests" in page.measured_on.object
    assert page._load_widgets[CLOSED].visible and not page._load_widgets[OPEN].visible


def test_the_gpu_box_puts_a_short_and_a_long_answer_through_the_h100s_floors():
    from engine.calc.gpu_scaling import (
        H100,
        LLAMA_3_8B,
        decode_step,
        prefill_floor_ms,
        step_floor_ms,
    )
    from lessons.average_lies import GPU_BATCH, answer_floor_ms, gpu_finding
    step = step_floor_ms(decode_step(LLAMA_3_8B, GPU_BATCH, 500), H100)
    short = answer_floor_ms(H100, 500, 100)
    assert short == pytest.approx(prefill_floor_ms(LLAMA_3_8B, H100, 500) + 99 * step)
    text = gpu_finding([H100])
    h100 = text[text.index("NVIDIA H100 SXM</th>"):]
    assert f"{answer_floor_ms(H100, 500, 1000) / short:.1f}x" in h100
    assert "Llama-3-8B" in text and "P99" in text
