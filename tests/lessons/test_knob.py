"""Lesson 4 without a browser: slider positions become sweep_point jobs (run for real on the
tiny model, or answered as if from the cache), points build the curve, the readouts follow. Its
default model streams its weights from memory: tests/lessons/test_memory_bound_defaults.py."""

from __future__ import annotations

import panel as pn
import param
import pytest
from in_process_service import run_job
from lesson_stubs import DEVICE, WHEN, attach

from engine.calc.batch_ladder import LADDER
from lessons.knob import (
    KnobLesson,
    Point,
    against_one,
    doubling,
    doubling_question,
    growth_outcome,
)

SMALL = {"preset": [b"tiny"], "prompt_len": [b"16"], "new_tokens": [b"8"]}


def release(page, batch: int) -> None:
    """The reader lets go of the slider at `batch` (the browser sets value, then value_throttled)."""
    page.batch_size = batch
    with param.edit_constant(page.slider):
        page.slider.value_throttled = batch


@pytest.fixture
def lesson():
    page = KnobLesson.from_url({**SMALL, "batch_size": [b"4"]})
    service = attach(page)
    pn.panel(page).get_root()
    [info] = [j for j in service.submitted if j.kind == "info"]  # the box on GPUs asks for it
    service.submitted.remove(info)
    return page, service


def test_loading_asks_for_here_half_and_one(lesson):
    page, service = lesson
    assert [j.params["batch_size"] for j in service.submitted] == [4, 2, 1]
    # the slider's point first; half and one are its context, asked in the background
    # (engine.lab.job_queue rule 1)
    assert [j.background for j in service.submitted] == [False, True, True]
    assert all(j.params["prompt_len"] == 16 and j.params["new_tokens"] == 8
               for j in service.submitted)


def test_points_build_the_curve_and_the_readouts(lesson):
    page, service = lesson
    page.runner.status.live.MIN_GAP_S = 600  # the points below come within the gap, however slow
    first, half, one = service.submitted
    service.run_for_real(first)
    assert page.curve.batches() == [4] and page.readouts.values["tput"]
    assert page.curve.marker.data["batch"] == [4]
    assert "Measuring batch 2 and 4" in page.gain.object
    service.run_for_real(half, cached=True)
    service.run_for_real(one)
    assert page.curve.batches() == [1, 2, 4]
    assert "Last doubling, batch 2 to 4" in page.gain.object
    assert "Against batch 1" in page.gain.object
    table = page.table.object
    assert table.count("cached (") == 1 and table.count("measured live (") == 2
    for batch in (1, 2, 4):  # each point in the table with the spread of its timed steps
        point = page.measured[batch]
        assert point.p10_ms <= point.tpot_ms <= point.p90_ms
        assert point.spread in table
        # and its disturbance check (quiet or disturbed: this machine may be busy)
        assert point.verdict != "not checked" and point.verdict.split(":")[0] in table
    assert "tiny preset (trained weights)" in page.measured_on.object
    # for screen readers: the table sits under the curve as its description, and the first
    # point was said in words (the later ones wait for the live region's gap)
    assert page.table is page.curve.text.table
    p4 = page.measured[4]
    assert page.runner.status.live.message == (
        f"batch 4 measured: {p4.tokens_per_s:,.0f} tokens/s, {p4.tpot_ms:.2f} ms per token")


def test_each_point_carries_its_step_count_and_interval(lesson):
    """new_tokens 8: 7 decode steps, the first 2 a warm-up, 5 timed; the median step's 95%
    interval brackets it and becomes the whiskers, the table's columns and the readout's note."""
    page, service = lesson
    service.run_for_real(service.submitted[0])
    here = page.measured[4]
    assert here.n == 5 and here.step.lo <= here.tpot_ms <= here.step.hi
    tok_lo, tok_hi, ms_lo, ms_hi = here.interval()
    assert tok_lo <= here.tokens_per_s <= tok_hi and (ms_lo, ms_hi) == (here.step.lo, here.step.hi)
    drawn = page.curve.point(4)
    assert drawn["n"] == 5 and (drawn["tokens_lo"], drawn["ms_hi"]) == (tok_lo, ms_hi)
    assert "first 2 are a warm-up and not counted, the other 5 are timed" in \
        page.measured_on.object
    assert "95% CI (tokens/s)" in page.table.object and here.ci_text("ms") in page.table.object
    assert "from 5 decode steps" in page.readouts.notes["tput"]


def test_a_point_cached_without_its_steps_has_no_whiskers():
    old = Point(tokens_per_s=400.0, tpot_ms=10.0)
    assert old.interval() is None and old.n == 0 and old.ci_text("tokens") == ""


def test_moving_the_slider_measures_only_what_is_missing(lesson):
    page, service = lesson
    for job in list(service.submitted):
        service.run_for_real(job)
    release(page, 8)
    assert [(j.params["batch_size"], j.background) for j in service.submitted[3:]] == [
        (8, False)]
    release(page, 16)
    # 16 added as the slider's point; 8, still queued, is 16's half now: asked again as its
    # context, in the background, so the reader's first point is the one at the slider
    assert [(j.params["batch_size"], j.background) for j in service.submitted[4:]] == [
        (16, False), (8, True)]
    assert [j.params["batch_size"] for j in service.cancelled] == [8]
    release(page, 8)
    # and back: 8 at the slider again, asked in the foreground; 16 (not 8's context) goes
    assert [(j.params["batch_size"], j.background) for j in service.submitted[6:]] == [
        (8, False)]
    assert sorted(j.params["batch_size"] for j in service.cancelled) == [8, 8, 16]
    release(page, 64)
    cancelled = {j.params["batch_size"] for j in service.cancelled}
    assert cancelled == {8, 16}  # queued and no longer needed
    assert [j.params["batch_size"] for j in service.submitted[7:]] == [64, 32]


def test_a_new_preset_starts_a_new_curve(lesson):
    page, service = lesson
    service.run_for_real(service.submitted[0])
    page.preset = "small"
    assert page.curve.batches() == []
    small_jobs = service.submitted[3:]
    assert {j.params["preset"] for j in small_jobs} == {"small"}
    assert page._table() == ""  # nothing of small measured yet
    # one of small's points arrives (the numbers are tiny's: the subject is the table's caption)
    job = small_jobs[0]
    service.finish(job, run_job("sweep_point", {**job.params, "preset": "tiny"})[1], cached=True)
    assert page.curve.batches() == [job.params["batch_size"]]
    assert "small preset (random weights: timing only)" in page._table()


def test_doubling_words():
    points = {4: Point(tokens_per_s=400.0, tpot_ms=10.0),
              8: Point(tokens_per_s=600.0, tpot_ms=13.3)}
    assert doubling(points, 8) == ("Last doubling, batch 4 to 8: total tokens/s x1.50 (+50%), "
                                   "each user's time per token x1.33 (+33%).")
    assert doubling(points, 1).startswith("Batch 1 is where the curve starts")
    level = {32: Point(1000.0, 32.0, p10_ms=30.0, p90_ms=35.0),  # 914-1067 tokens/s
             64: Point(980.0, 65.3, p10_ms=60.0, p90_ms=70.0)}  # 914-1067 tokens/s
    assert "within the two points' own spread" in doubling(level, 64)
    level[64] = Point(800.0, 80.0, p10_ms=78.0, p90_ms=82.0)  # 780-821: a real fall
    assert "spread" not in doubling(level, 64)
    assert against_one(points, 8) == ""
    points[1] = Point(tokens_per_s=100.0, tpot_ms=10.0)
    assert against_one(points, 8) == ("Against batch 1: 6.0 times the throughput for 1.3 times "
                                      "the time per token.")


def test_warm_jobs_cover_the_powers_of_two():
    batches = [p["batch_size"] for _, p in KnobLesson.warm_jobs()]
    assert batches == list(LADDER) and batches[-1] == 64


def test_the_download_is_the_curve_with_its_measurement_record(lesson):
    """CSV and JSON hold the points the curve draws (same numbers, batch order) and a header
    naming device, engine version, preset, parameters, cached or fresh, and the check."""
    import json

    from widgets.data_download import read_csv

    page, service = lesson
    first, half, one = service.submitted
    service.run_for_real(first)
    service.run_for_real(one, cached=True)
    csv_file, json_file = page.download.texts()
    data = json.loads(json_file)
    drawn = page.curve.points.data
    for row in data["rows"]:
        i = drawn["batch"].index(row["batch"])
        for key, value in row.items():
            assert value == drawn[key][i], key
    assert [r["batch"] for r in data["rows"]] == [1, 4] and data["rows"][1]["n"] == 5
    head = data["header"]
    assert head["preset"] == "tiny" and head["device"] == page.device
    assert head["params"] == {"preset": "tiny", "prompt_len": 16, "new_tokens": 8,
                              "shared_prompt": True}
    assert "batch 1: cached, measured" in head["measured"]
    assert "batch 4: fresh, measured" in head["measured"]
    assert head["engine_version"]
    # filled from the worker's disturbance check (quiet, or disturbed on a busy machine)
    assert head["disturbance_check"].startswith(("quiet", "disturbed")), head["disturbance_check"]
    csv_head, csv_rows = read_csv(csv_file)
    assert csv_head["preset"] == "tiny" and json.loads(csv_head["params"]) == head["params"]
    assert [float(r["tokens_per_s"]) for r in csv_rows] == \
        [r["tokens_per_s"] for r in data["rows"]]
    assert [float(r["ms_lo"]) for r in csv_rows] == [r["ms_lo"] for r in data["rows"]]


def test_the_frontier_chart_has_a_point_per_batch_size(lesson):
    page, service = lesson
    for job in list(service.submitted):
        service.run_for_real(job)
    drawn = {p["setting"]: p for p in page.pareto.points()}
    assert sorted(drawn) == [1, 2, 4]
    for batch, point in page.measured.items():
        d = drawn[batch]
        assert d["total"] == point.tokens_per_s and d["per_user"] == 1000 / point.tpot_ms
        assert d["per_user_lo"] <= d["per_user"] <= d["per_user_hi"] and d["n"] == 5
    best_total = max(drawn.values(), key=lambda d: d["total"])
    best_user = max(drawn.values(), key=lambda d: d["per_user"])
    assert best_total["frontier"] and best_user["frontier"]  # nothing beats either on both
    assert "batch 4" in page.pareto.table_html
    assert json_rows(page.pareto_download) == page.pareto.points()


def json_rows(download) -> list[dict]:
    import json
    return json.loads(download.texts()[1])["rows"]


def curve(**tokens_per_s):
    return {int(b[1:]): Point(v, 1000 * int(b[1:]) / v) for b, v in tokens_per_s.items()}


def test_the_question_on_your_curve_is_keyed_by_your_points():
    points = curve(b1=100, b2=190, b4=350, b8=400, b16=420)  # +90%, +84%, +14%, +5%
    q = doubling_question(points)
    assert q.answer.text == "4 to 8" and "+14%" in q.answer.why
    assert "batch 1 to 16" in q.prompt and "None up to batch 16" in [c.text for c in q.choices]
    steep = curve(b1=100, b2=200, b4=400, b8=800)
    assert doubling_question(steep).answer.text == "None up to batch 8"
    assert doubling_question(curve(b1=100, b2=200, b4=400)) is None  # not up to 8 yet
    assert doubling_question(curve(b1=100, b2=200, b8=400)) is None  # a gap in the ladder


def test_the_prediction_is_judged_on_batch_1_against_batch_8():
    assert growth_outcome(curve(b1=100, b8=700))[0] == "6 to 8 times as many"
    assert growth_outcome(curve(b1=100, b8=400))[0] == "3 to 6 times as many"
    assert growth_outcome(curve(b1=100, b8=250))[0] == "Under 3 times as many"
    assert growth_outcome(curve(b1=100)) is None

def test_a_nearby_cached_point_of_the_same_curve_is_drawn_while_the_point_waits(lesson):
    page, service = lesson
    first = service.submitted[0]  # batch 4 waits in the engine's queue
    assert first.nearby
    other = {**first.params, "batch_size": 8}
    point = run_job("sweep_point", other)[1]
    service.send(first, "nearby", {**point, "prompt_len": 99}, cached=True, device=DEVICE,
                 measured_at=WHEN, near={**other, "prompt_len": 99})
    assert page.curve.batches() == []  # another prompt length: another curve, not drawn
    service.send(first, "nearby", point, cached=True, device=DEVICE, measured_at=WHEN,
                 near=other)
    assert page.curve.batches() == [8] and "cached (" in page.table.object
    assert "nearby: a result of batch_size 8 (you asked for 4)" in page.runner.status.label_text
    service.run_for_real(first)
    assert page.curve.batches() == [4, 8] and page.readouts.values["tput"]


def test_with_the_teachers_endpoint_the_knob_is_concurrent_clients(endpoint_set):
    page = KnobLesson.from_url({**SMALL, "batch_size": [b"4"], "source": [b"endpoint"]})
    service = attach(page)
    pn.panel(page).get_root()
    jobs = [j for j in service.submitted if j.kind != "info"]  # info: the box on GPUs
    assert [j.kind for j in jobs] == ["endpoint_concurrency"] * 3
    assert [j.params["concurrency"] for j in jobs] == [4, 2, 1]
    assert jobs[0].params["url"] == endpoint_set.url and "preset" not in jobs[0].params
    for job in jobs:
        result = service.run_for_real(job)
        assert result["completed"] == result["concurrency"] and result["failed"] == 0
    assert page.curve.batches() == [1, 2, 4]
    assert page.curve.figure.xaxis[0].axis_label.startswith("concurrent clients")
    assert page.slider.name.startswith("Concurrent clients") and not page.preset_choice.visible
    assert "Last doubling, clients 2 to 4" in page.gain.object
    assert page.curve.text.sentence.startswith("3 client counts measured: from concurrency 1")
    assert [p["label"] for p in page.pareto.points()] == ["clients 1", "clients 2", "clients 4"]
    assert f"tiny at {endpoint_set.host}" in page.measured_on.object
    assert f"over HTTP, tiny at {endpoint_set.host}" in page.table.object
    page.source = "engine"  # back to the built-in engine: batch sizes again
    assert service.submitted[-1].kind == "sweep_point" and page.preset_choice.visible
    assert page.curve.figure.xaxis[0].axis_label.startswith("batch size")


def test_a_cached_point_waits_for_the_prediction_too():
    """No answer before the prediction: the default view's point is in the cache, yet nothing
    is sent (so nothing drawn) until the reader skips; the status says a result is ready."""
    page = KnobLesson.from_url({**SMALL, "batch_size": [b"1"]})
    service = attach(page, predict=True)
    service.put("sweep_point", page.job_params(1), {"result": {}, "device": DEVICE,
                                                    "measured_at": WHEN})
    pn.panel(page).get_root()
    assert [j.kind for j in service.submitted if j.kind == "sweep_point"] == []
    assert "a result is ready" in page.runner.status.message
    assert page.curve.batches() == [] and page._table() == ""
    page.prediction_box.skip()
    assert [j.params["batch_size"] for j in service.submitted if j.kind == "sweep_point"] == [1]
