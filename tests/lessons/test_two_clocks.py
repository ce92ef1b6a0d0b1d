"""Lesson 1 without a browser: the reader's prompt is run for real in this process (the
`two_clocks` job on the trained tiny model) and its events drawn; browser stamps are fed as the
browser would sync them."""

from __future__ import annotations

import html

import panel as pn
import pytest
from lesson_stubs import DEVICE, attach, downloaded, said

from lessons.two_clocks import (
    BROWSER_ROW,
    ENGINE_ROW,
    TwoClocksLesson,
    _fmt_ms,
    browser_summary,
)


@pytest.fixture
def lesson():
    page = TwoClocksLesson.from_url({"max_new_tokens": [b"8"], "background": [b"2"]})
    service = attach(page)
    pn.panel(page).get_root()
    return page, service


def test_url_values_are_clamped_with_a_notice():
    page = TwoClocksLesson.from_url({"background": [b"40"], "streamed": [b"false"]})
    assert page.background == 16 and page.streamed is False
    assert any("above the largest allowed" in n for n in page.notices)


def test_sending_streams_ticks_and_fills_the_engine_readouts(lesson):
    page, service = lesson
    page.send.clicks += 1
    [job] = [j for j in service.submitted if j.kind != "info"]  # info: the GPU box
    assert job.kind == "two_clocks" and job.params["background"] == 2
    assert job.params["prompt"] == page.prompt and job.params["stream"] is True
    result = service.run_for_real(job)
    ticks = page.timeline.ticks(ENGINE_ROW)
    assert len(ticks) == 8 == len(result["tokens"])
    assert ticks == pytest.approx([t["t_ms"] for t in result["tokens"]])
    parts = page.timeline.spans.data["part"]
    assert parts == ["queued", "prefill"]
    text = page.engine_readouts.text
    assert "TTFT: queued" in text and " ms" in text and "TTFT + (N - 1) x TPOT" in text
    assert "tokens/s" in page.engine_readouts.values["speed"]
    assert "[" in page.engine_readouts.values["speed"]  # 1000 / TPOT, with its interval
    itl = page.engine_readouts.values["itl"]  # P50 [its 95% interval] / P99 †: 7 gaps
    assert itl.count("[") == 1 and itl.endswith("\u2020 ms")
    assert "n = 7 gaps" in page.engine_readouts.notes["itl"]
    assert "too few gaps to bound the P99 (needs 100)" in page.engine_readouts.notes["itl"]
    assert html.escape(result["text"]) in page.answer.object
    assert "tiny preset (trained weights)" in page.measured_on.object
    assert "2 background requests" in page.measured_on.object
    m = result["metrics"]
    assert any(s and s.startswith("Answer measured: first token after ") and
               s.endswith(f"8 tokens, the whole answer in {_fmt_ms(m['e2e_ms'])}.")
               for s in said(page))
    # One bar for the request, by phase: the tokenizer's run measured, the phases add up to
    # the request's time from arrival to its text (engine.serve.phases).
    phases = result["phases"]
    [(label, total)] = page.phase_bars.totals().items()
    assert label.startswith(f"#1: {result['prompt_tokens']}-token prompt")
    assert total == pytest.approx(phases["e2e_ms"])
    assert phases["tokenize_ms"] > 0 and phases["detokenize_ms"] > 0
    assert phases["e2e_ms"] >= m["e2e_ms"]  # to the text, after the last token
    assert "tokenize" in page.phase_bars.table_html


def test_browser_stamps_fill_the_second_clock(lesson):
    page, service = lesson
    page.run()
    result = service.run_for_real(service.submitted[-1])
    n = len(result["tokens"])
    # what the browser's JavaScript syncs back: its own arrival times, since the click
    page.clock.into.data = {"x": [400.0 + 10 * i for i in range(n)], "row": [BROWSER_ROW] * n,
                            "index": list(range(n)), "text": [""] * n}
    values = page.browser_readouts.values
    assert values["first"] == "400 ms" and values["last"] == f"{400 + 10 * (n - 1)} ms"
    assert "browser (ms since click)" in page.token_table.object


def test_the_download_is_the_timeline_on_both_clocks(lesson):
    """CSV and JSON hold every tick the timeline draws (both clocks) and the shaded wait, under
    the run's record: device, preset, the job's parameters, cached or fresh."""
    page, service = lesson
    page.run()
    result = service.run_for_real(service.submitted[-1], cached=True)
    n = len(result["tokens"])
    page.clock.into.data = {"x": [400.0 + 10 * i for i in range(n)], "row": [BROWSER_ROW] * n,
                            "index": list(range(n)), "text": [""] * n}
    head, rows = downloaded(page.download)
    for clock in (ENGINE_ROW, BROWSER_ROW):
        mine = [r for r in rows if r["clock"] == clock]
        assert [r["ms"] for r in mine] == page.timeline.ticks(clock) and len(mine) == n
        assert [r["token"] for r in mine] == list(range(n))
    assert [r["text"] for r in rows[:n]] == [t["text"] for t in result["tokens"]]
    spans = page.timeline.spans.data
    assert [(w["part"], w["from_ms"], w["to_ms"]) for w in head["waits"]] == list(
        zip(spans["part"], spans["left"], spans["right"], strict=True))
    assert head["device"] == DEVICE and head["preset"] == "tiny" and head["job"] == "two_clocks"
    assert head["params"]["max_new_tokens"] == 8 and head["params"]["background"] == 2
    assert head["measured"].startswith("cached, measured 2026-")
    assert head["engine_version"] and head["disturbance_check"]


def test_not_streamed_draws_the_whole_answer_at_the_end(lesson):
    page, service = lesson
    page.streamed = False
    page.run()
    job = service.submitted[-1]
    assert job.params["stream"] is False
    service.send(job, "started")
    assert page.timeline.ticks(ENGINE_ROW) == []
    service.run_for_real(job)
    assert len(page.timeline.ticks(ENGINE_ROW)) == 8


def test_an_engine_error_is_a_message_not_a_traceback(lesson):
    page, service = lesson
    page.run()
    service.send(service.submitted[-1], "error", {"message": "the prompt is empty: give some text"})
    assert "the prompt is empty" in page.runner.status.error._alert.object
    assert "No answer" in page.answer.object


def test_browser_summary_compares_the_clocks():
    s = browser_summary([10.0, 20.0, 30.0], [300.0, 310.0, 345.0])
    assert s["first_ms"] == 300.0 and s["last_ms"] == 345.0 and s["outside_ms"] == 290.0
    assert s["lag_p50"] == 0.0 and s["lag_max"] == 25.0
    assert browser_summary([1.0], []) == {}


def test_checkpoint_has_three_to_six_questions():
    assert 3 <= len(TwoClocksLesson.questions) <= 6


def test_send_waits_for_the_prediction_then_shows_it_against_the_measurement():
    page = TwoClocksLesson.from_url({"max_new_tokens": [b"8"]})
    service = attach(page, predict=True)
    pn.panel(page).get_root()
    page.send.clicks += 1
    assert [j.kind for j in service.submitted if j.kind != "info"] == []  # held
    assert "prediction" in page.runner.status.message
    page.prediction_box.choice = "Each gap after it"
    [job] = [j for j in service.submitted if j.kind != "info"]  # sent once predicted
    result = service.run_for_real(job)
    m = result["metrics"]
    verdict = page.prediction_box.verdict
    assert "You predicted: Each gap after it" in verdict
    assert f"TTFT {m['ttft_ms']:.1f}" in verdict or f"TTFT {m['ttft_ms']:,.0f}" in verdict


def test_the_question_on_your_run_has_your_e2e_as_its_key(lesson):
    page, service = lesson
    assert len(page.checkpoint.questions) == len(TwoClocksLesson.questions) - 1  # not yet
    page.run()
    result = service.run_for_real(service.submitted[-1])
    m = result["metrics"]
    asked = page.checkpoint.questions[-1].question
    assert f"{m['ttft_ms']:,.0f} ms" in asked.prompt and f"{m['output_tokens']} tokens" in asked.prompt
    assert asked.answer.text == f"{m['e2e_ms']:,.0f} ms"
    # the key is the definition: TTFT + (N - 1) x TPOT, the engine's own E2E
    n = m["output_tokens"]
    assert m["ttft_ms"] + (n - 1) * m["tpot_ms"] == pytest.approx(m["e2e_ms"])


def test_with_the_teachers_endpoint_the_prompt_streams_from_it(endpoint_set):
    page = TwoClocksLesson.from_url({"max_new_tokens": [b"8"], "background": [b"2"],
                                     "source": [b"endpoint"]})
    service = attach(page)
    pn.panel(page).get_root()
    assert not any(w.visible for w in page._engine_only)  # no document, always streamed
    page.send.clicks += 1
    [job] = [j for j in service.submitted if j.kind != "info"]
    assert job.kind == "endpoint_stream" and job.params["url"] == endpoint_set.url
    assert job.params["background"] == 2 and job.params["prompt"] == page.prompt
    result = service.run_for_real(job)
    ticks = page.timeline.ticks(ENGINE_ROW)
    assert len(ticks) == 8 == result["output_tokens"]
    assert page.timeline.spans.data["part"] == ["waiting"]
    assert "queue and prefill are inside the server" in page.engine_readouts.text
    assert html.escape(result["text"]) in page.answer.object
    assert f"tiny at {endpoint_set.host}" in page.measured_on.object
    assert "2 background requests" in page.measured_on.object
    assert "server (ms since sent)" in page.token_table.object
    assert any(s and s.startswith(f"Answer measured over HTTP from tiny at {endpoint_set.host}")
               for s in said(page))
    head, rows = downloaded(page.download)
    assert head["job"] == "endpoint_stream" and head["preset"] == "tiny"
    assert "the endpoint, timed at this app" in head["columns"]
    page.source = "engine"
    assert all(w.visible for w in page._engine_only)
