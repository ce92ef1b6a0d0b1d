"""Lesson 11 without a browser: the jobs it asks for (the machine's limits, float32 and int8 at
batch 1, 4 and 16, the quality check on every held-out window), and what it shows from their
real results on the tiny preset: int8's steps read about a quarter of the weight bytes, the
table, the chart's points, the explanation from the measured bandwidth, the quality figures as
the job returned them, the prediction's verdict, the question on the reader's numbers and the
download with its measurement header."""

from __future__ import annotations

import panel as pn
import pytest
from in_process_service import attach
from lesson_stubs import downloaded, said

from lessons import quantization
from lessons.quantization import (
    BATCHES,
    QUALITY,
    SPEED_CHOICES,
    QuantizationLesson,
    Step,
    best_batch_question,
    explain,
    speed_outcome,
)
from widgets.tables import sig

TINY = {"preset": [b"tiny"]}
# The quality check on 4 of the page's 58 windows: what is asserted (the job's own figures on the
# page, int8 within 0.01 of float32's loss) holds on any number, and the engine's tests check
# int8's quality on 2 (tests/engine/model/test_int8.py); the page's 58 are checked as params.
FEW = {**QUALITY, "windows": 4}


@pytest.fixture
def lesson(int8_kernel, monkeypatch):
    """The page on real runs (each job runs once per test session: in_process_service)."""
    monkeypatch.setattr(quantization, "QUALITY", FEW)
    page = QuantizationLesson.from_url(TINY)
    page.service = attach(page)
    pn.panel(page).get_root()
    return page


def test_it_asks_for_the_machine_six_points_and_the_quality_check(lesson):
    jobs = [(j.kind, j.params) for j in lesson.service.submitted]
    assert jobs[0][0] == "info"
    points = [(p["batch_size"], p["weight_format"]) for k, p in jobs if k == "int8_point"]
    assert points == [(b, f) for b in BATCHES for f in ("fp32", "int8")]
    assert all(p["preset"] == "tiny" for k, p in jobs if k == "int8_point")
    quality = [p for k, p in jobs if k == "int8_quality"]
    assert quality == [FEW] and QUALITY["windows"] == 58  # the page's: every held-out window
    defaults = QuantizationLesson.warm_jobs()
    assert {p["preset"] for k, p in defaults if k == "int8_point"} == {"small"}


def test_the_page_shows_the_measured_steps_and_why(lesson):
    pairs = lesson.pairs()
    assert set(pairs) == set(BATCHES)
    for f, i in pairs.values():
        assert 0.24 <= i.weight_bytes / f.weight_bytes <= 0.27  # a byte a weight, plus scales
        assert i.bytes < f.bytes
        for s in (f, i):
            assert sig(s.tpot_ms) in lesson.table.object
            assert s.gbs == pytest.approx(s.bytes / s.tpot_ms / 1e6, rel=1e-6)
        assert f"**{i.tpot_ms / f.tpot_ms:.2f}x** float32's" in lesson.verdict.object
    assert lesson.table.object.count("<tr>") == 1 + 2 * len(BATCHES)
    assert len(lesson.chart.points("int8 weights")) == len(BATCHES)
    assert len(lesson.chart.points("fp32 weights")) == len(BATCHES)
    bandwidth = lesson.machine.memory_bandwidth_gbs
    for pair in pairs.values():
        assert explain(pair, bandwidth) in lesson.why.object
    choice, detail = speed_outcome(*pairs[1])
    assert f"Measured: {choice} ({detail})" in lesson.prediction_box.verdict
    asked = lesson.checkpoint.questions[-1].question
    ratios = {b: i.tpot_ms / f.tpot_ms for b, (f, i) in pairs.items()}
    assert asked.answer.text == f"Batch {min(ratios, key=ratios.get)}"


def test_the_quality_figures_are_the_jobs_own(lesson):
    q = lesson.service.result("int8_quality")
    assert q["positions"] == FEW["windows"] * FEW["seq_len"]
    assert f"**{q['loss_fp32']:.6f}**" in lesson.quality_pane.object
    assert f"**{q['loss_int8']:.6f}**" in lesson.quality_pane.object
    assert f"**{100 * q['agreement']:.2f}%**" in lesson.quality_pane.object
    assert abs(q["loss_int8"] - q["loss_fp32"]) < 0.01 and q["agreement"] > 0.95
    lesson.show_quality(lesson.quality, cached=True)
    assert (f"Quality from the cache: loss {q['loss_fp32']:.4f} with float32 weights, "
            f"{q['loss_int8']:.4f} with int8; the same next token at "
            f"{100 * q['agreement']:.2f}% of positions.") in said(lesson)


def test_the_download_carries_every_step_and_how_it_was_measured(lesson):
    header, rows = downloaded(lesson.download)
    assert [(r["batch"], r["weights"]) for r in rows] == [
        (b, f) for b in BATCHES for f in ("fp32", "int8")]
    assert all(r["check"] for r in rows) and all(r["p10_ms"] <= r["p90_ms"] for r in rows)
    assert header["roofs"]["memory_bandwidth_gbs"] == lesson.machine.memory_bandwidth_gbs
    assert header["quality"]["agreement"] == lesson.quality.agreement
    assert "int8, batch 16" in header["params"] and header["disturbance_check"]


def step(fmt: str, tpot: float, gb: float, batch: int = 1) -> Step:
    return Step(batch=batch, fmt=fmt, tpot_ms=tpot, p10_ms=tpot, p90_ms=tpot,
                bytes=int(gb * 1e9), weight_bytes=int(gb * 1e9), gbs=gb / tpot * 1e3,
                intensity=1.0, gflops=1.0, check="quiet", weights="random")


def test_the_explanation_follows_what_each_step_waited_for():
    # float32 at the bandwidth, int8 far under it and as slow: the kernel's work set the pace
    same = explain((step("fp32", 21.0, 0.514), step("int8", 20.5, 0.129)), 24.0)
    assert "waited on memory" in same and "waited on work, not on memory" in same
    assert "0.98x float32's time" in same and "widening" in same
    # both at the bandwidth: the saving became speed
    fast = explain((step("fp32", 21.0, 0.514), step("int8", 5.6, 0.129)), 24.0)
    assert "The byte saving became speed" in fast
    # float32 itself slow: int8's kernel wins without reaching the bandwidth either
    slow = explain((step("fp32", 43.6, 0.514), step("int8", 25.4, 0.129)), 24.0)
    assert "was not waiting on memory either" in slow
    assert speed_outcome(step("fp32", 21.0, 0.5), step("int8", 20.5, 0.1))[0] == SPEED_CHOICES[2]
    assert speed_outcome(step("fp32", 21.0, 0.5), step("int8", 12.0, 0.1))[0] == SPEED_CHOICES[1]
    assert speed_outcome(step("fp32", 21.0, 0.5), step("int8", 6.0, 0.1))[0] == SPEED_CHOICES[0]
    assert best_batch_question({1: (step("fp32", 2, 1), step("int8", 2, 1))}) is None


def test_the_gpu_box_takes_this_machine_from_the_pages_own_info_job(lesson):
    """One info job (the page's), whose limits also head the "On a GPU" box; the box gives
    Llama-3-8B's weights in bf16, 8 and 4 bits (16, 8, 4 GB) and the batch-1 TPOT floor of
    each, the H100's 4.79, 2.40 and 1.20 ms (bytes / 3,350 GB/s)."""
    assert [j.kind for j in lesson.service.submitted].count("info") == 1
    text = lesson.gpu_box.text
    assert "(measured here)" in text
    for label in ("bf16: 16 GB", "int8 or FP8: 8 GB", "4-bit: 4 GB"):
        assert label in text
    h100 = text[text.rindex("NVIDIA H100 SXM</th>"):]  # the finding, below the limits
    h100 = h100[:h100.index("</tr>")]
    assert [c for c in ("4.79", "2.4", "1.2") if c in h100] == ["4.79", "2.4", "1.2"]
