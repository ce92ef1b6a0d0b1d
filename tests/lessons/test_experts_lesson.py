"""Lesson 14 without a browser: the jobs it asks for (the MoE preset and its dense twin at every
batch size), and what it shows from their real results on the tiny expert presets: batch 1 reads
top-k experts, a larger batch more, the dense model's bytes flat; the table, the charts' points,
the prediction's verdict, the question on the reader's numbers, the download and the "On a GPU"
box's floors."""

from __future__ import annotations

import panel as pn
import pytest
from in_process_service import attach
from lesson_stubs import downloaded

from engine.config import get_preset
from lessons import experts
from lessons.experts import (
    BATCHES,
    DENSE,
    TIME_CHOICES,
    ExpertsLesson,
    Point,
    half_read_question,
    time_outcome,
)
from tests.engine.model.moe_plan import seed_step_plan
from widgets.tables import sig

TINY = {"preset": [b"moe-tiny"]}
CFG = get_preset("moe-tiny")


# Shorter prompts and fewer tokens than the page's (64 and 16): what is asserted (the experts a
# decode step reads, the bytes, the table, the verdict) holds at any length, and 14 runs up to
# batch 64 of the page's lengths were most of this package's time.
SHORT = {"PROMPT_LEN": 16, "NEW_TOKENS": 6}


@pytest.fixture(scope="module")
def lesson():
    """The page on real runs of moe-tiny and moe-tiny-dense (each job once per session)."""
    for preset in DENSE.values():
        if preset.startswith("moe-tiny"):
            seed_step_plan(preset)
    seed_step_plan("moe-tiny")
    with pytest.MonkeyPatch.context() as patch:
        for name, value in SHORT.items():
            patch.setattr(experts, name, value)
        page = ExpertsLesson.from_url(TINY)
        page.service = attach(page)
        pn.panel(page).get_root()
    return page


def test_it_asks_for_both_models_at_every_batch(lesson):
    jobs = [(j.kind, j.params) for j in lesson.service.submitted if j.kind == "experts_point"]
    assert [(p["preset"], p["batch_size"]) for _, p in jobs] == [
        (preset, b) for b in BATCHES for preset in ("moe-tiny", "moe-tiny-dense")]
    assert {(p["prompt_len"], p["new_tokens"]) for _, p in jobs} == {tuple(SHORT.values())}
    assert {(p["prompt_len"], p["new_tokens"])
            for _, p in ExpertsLesson().default_jobs().values()} == {(64, 16)}  # the page's
    defaults = {p["preset"] for _, p in ExpertsLesson.warm_jobs()}
    assert defaults == {"moe-mini", "moe-mini-dense"}


def test_the_page_shows_the_experts_read_and_the_bytes(lesson):
    moe = {b: lesson.points["moe", b] for b in BATCHES}
    dense = {b: lesson.points["dense", b] for b in BATCHES}
    assert moe[1].experts_read == CFG.top_k  # one token reads its k experts
    assert moe[64].experts_read == CFG.experts  # 128 picks of 4 experts read them all
    reads = [moe[b].experts_read for b in BATCHES]
    assert reads == sorted(reads)
    assert len({dense[b].weight_bytes for b in BATCHES}) == 1  # dense: flat
    assert moe[64].weight_bytes > moe[1].weight_bytes
    for p in (*moe.values(), *dense.values()):
        assert sig(p.tpot_ms) in lesson.table.object
    assert lesson.table.object.count("<tr>") == 1 + len(BATCHES)
    assert lesson.chart.sources["moe"].data["batch"] == list(BATCHES)
    assert lesson.chart.sources["dense"].data["experts_read"] == [0.0] * len(BATCHES)
    choice, detail = time_outcome(moe[64], dense[64])
    assert f"Measured: {choice} ({detail})" in lesson.prediction_box.verdict
    asked = lesson.checkpoint.questions[-1].question
    first = next(b for b in BATCHES if moe[b].experts_read >= CFG.experts / 2)
    assert asked.answer.text == f"Batch {first}"


def test_the_download_carries_every_point_and_how_it_was_measured(lesson):
    header, rows = downloaded(lesson.download)
    assert [(r["model"], r["batch"]) for r in rows] == (
        [("dense", b) for b in BATCHES] + [("moe", b) for b in BATCHES])
    assert all(r["check"] and r["p10_ms"] <= r["p90_ms"] for r in rows)
    assert "moe, batch 64" in header["params"] and header["disturbance_check"]


def point(model: str, batch: int, read: float, tpot: float, mib: float) -> Point:
    return Point(batch=batch, model=model, experts_read=read, expected=read,
                 weight_bytes=int(mib * 2**20), tpot_ms=tpot, p10_ms=tpot, p90_ms=tpot,
                 tokens_per_s=batch / tpot * 1000, check="quiet", weights="random")


def test_the_verdict_and_the_question_follow_the_numbers():
    dense = point("dense", 64, 0, 30.0, 76)
    assert time_outcome(point("moe", 64, 16, 33.0, 412), dense)[0] == TIME_CHOICES[0]
    assert time_outcome(point("moe", 64, 16, 45.0, 412), dense)[0] == TIME_CHOICES[1]
    assert time_outcome(point("moe", 64, 16, 90.0, 412), dense)[0] == TIME_CHOICES[2]
    reads = {1: 2, 2: 3.7, 4: 6.5, 8: 10.8, 16: 14.4, 32: 15.8, 64: 16}
    moe = {b: point("moe", b, r, 10.0, 100) for b, r in reads.items()}
    asked = half_read_question(moe, 16)
    assert asked.answer.text == "Batch 8" and len(asked.choices) == 3
    assert half_read_question({1: moe[1]}, 16) is None


def test_the_gpu_box_gives_each_quoted_models_floors(lesson):
    """Mixtral 8x7B's 13B active and 47B total in bf16, DeepSeek-V3's 37B and 671B in FP8, as
    bytes / bandwidth: on the H100 (3,350 GB/s) 7.76, 28.1, 11.0 and 200 ms."""
    text = lesson.gpu_box.text
    h100 = text[text.rindex("NVIDIA H100 SXM</th>"):]
    h100 = h100[:h100.index("</tr>")]
    assert [c for c in ("7.76", "28.1", "11", "200") if c in h100] == ["7.76", "28.1", "11", "200"]
