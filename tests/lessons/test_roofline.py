"""Lesson 5 without a browser or an engine: which jobs it asks for, and what it draws from
their results (tests/lessons/engine_stub.py answers them)."""

from __future__ import annotations

import panel as pn
import pytest
from engine_stub import StubService, attach

from engine.config import PRESETS
from engine.step_cost import decode_context, decode_cost
from lessons.roofline import DECODE, PREFILL, RooflineLesson, powers


def lesson(args=None, service=None):
    page = RooflineLesson.from_url(args or {})
    pn.panel(page).get_root()
    return page, attach(page, service or StubService())


def test_powers_end_at_the_limit():
    assert powers(1, 2, 32) == [1, 2, 4, 8, 16, 32]
    assert powers(1, 2, 6) == [1, 2, 4, 6]
    assert powers(16, 4, 1024) == [16, 64, 256, 1024] and powers(16, 4, 16) == [16]


def test_the_url_picks_the_measurements():
    page, service = lesson({"preset": [b"tiny"], "max_batch": [b"4"], "max_prompt": [b"64"]})
    page.start()
    assert service.kinds() == ["info"] + ["sweep_point"] * 3 + ["prefill_point"] * 2
    sweeps = [j.params for j in service.submitted if j.kind == "sweep_point"]
    assert [p["batch_size"] for p in sweeps] == [1, 2, 4]
    assert all(p["preset"] == "tiny" and p["prompt_len"] == 128 for p in sweeps)
    assert RooflineLesson.warm_jobs()[0] == ("info", {})
    assert len(RooflineLesson.warm_jobs()) == 1 + 6 + 4


def test_points_land_under_the_roofs_with_the_preset_formulas():
    page, service = lesson({"max_batch": [b"4"], "max_prompt": [b"256"]})
    page.start()
    assert page.chart.bandwidth_gbs == 30.0 and page.chart.peak_gflops == 180.0
    decode = page.chart.points(DECODE)
    assert [p["label"] for p in decode] == ["decode, batch 1", "decode, batch 2",
                                            "decode, batch 4"]
    cost = decode_cost(PRESETS["small"].describe("cpu"), 4, decode_context(128, 32))
    assert decode[2]["intensity"] == pytest.approx(cost.intensity)
    assert decode[2]["gflops"] == pytest.approx(cost.flops / 0.028 / 1e9)
    assert [p["label"] for p in page.chart.points(PREFILL)][-1] == "prefill, 256 tokens"
    rows = page.floor.rows()
    assert [r["x"] for r in rows] == [1, 2, 4]
    assert rows[0]["floor"] == pytest.approx(1000 * decode_cost(
        PRESETS["small"].describe("cpu"), 1, decode_context(128, 32)).bytes / 30e9)
    assert "30.0 GB/s" in page.limits.object and "6.00 FLOP" in page.limits.object
    assert "Decode, batch 1" in page.roof_summary.object
    assert "Prefill, 256 tokens" in page.roof_summary.object
    assert "the engine took **22.0 ms**" in page.floor_summary.object
    assert not page.status.running and "measured live" in page.status.label_text


def test_points_that_come_before_the_machines_limits_wait_for_them():
    service = StubService(hold={"info", "sweep_point", "prefill_point"})
    page, _ = lesson({"max_batch": [b"2"], "max_prompt": [b"16"]}, service)
    page.start()
    service.release(reverse=True)  # the points first, the machine's info last
    assert len(page.chart.points(DECODE)) == 2 and len(page.chart.points(PREFILL)) == 1
    assert page.pending == []


def test_moving_a_control_measures_again_and_drops_the_old_batch():
    service = StubService(hold={"sweep_point"})
    page, _ = lesson({"max_batch": [b"2"], "max_prompt": [b"16"]}, service)
    page.start()
    old = [j for j in service.submitted if j.kind == "sweep_point"]
    page.max_batch = 1
    assert set(service.cancelled) == set(old)
    service.release()
    assert [p["label"] for p in page.chart.points(DECODE)] == ["decode, batch 1"]


def test_an_engine_error_is_a_message():
    page, _ = lesson({"max_batch": [b"1"], "max_prompt": [b"16"]},
                     StubService(fail={"prefill_point": "the KV budget holds no block"}))
    page.start()
    assert "the KV budget holds no block" in page.status.error._alert.object
    assert len(page.chart.points(DECODE)) == 1


def test_the_url_is_clamped_with_a_notice():
    page, _ = lesson({"max_batch": [b"500"]})
    assert page.max_batch == 64 and "largest allowed (64)" in page.notices[0]


def test_checkpoint_questions():
    assert len(RooflineLesson().questions()) >= 3
