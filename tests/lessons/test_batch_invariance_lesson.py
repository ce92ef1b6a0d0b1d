"""Lesson 13 without a browser, on planted results of its three `invariance` jobs (the job
itself runs for real in tests/engine/lab/test_invariance_job.py; its measurement in
tests/engine/test_batch_invariant.py): the jobs it asks for, the tables and verdicts drawn from
the records, the prediction's verdict, the question on the reader's numbers, the cost of the
invariant mode as a ratio of the measured steps, and the download."""

from __future__ import annotations

import panel as pn
import pytest
from lesson_stubs import attach, downloaded

from engine.lab.registry import JOBS
from lessons.batch_invariance import (
    BATCHES,
    CHUNKED,
    DEFAULT,
    INVARIANT_RUN,
    RUNS,
    BatchInvarianceLesson,
)
from lessons.words.batch_invariance import PREDICTION

VOCAB = 4096


def planted(params: dict, ulps: dict[int, int], differ: dict[int, int], steps: dict[int, float]):
    """An invariance result in the job's shape: every seed of a batch with the batch's ULP,
    `differ[b]` of them with a text that differs at token 5."""
    seeds = params["seeds"]
    points = []
    for b in params["batch_sizes"]:
        runs = [{"seed": s, "first_diff": 5 if s < differ.get(b, 0) else None,
                 "max_ulp": ulps[b], "max_abs": ulps[b] * 1e-10,
                 "differing_logits": 100 if ulps[b] else 0,
                 "compared_logits": 32 * VOCAB} for s in range(seeds)]
        points.append({"batch": b, "seeds": runs, "texts_differ": differ.get(b, 0),
                       "max_ulp": ulps[b], "max_abs": ulps[b] * 1e-10, "step_ms": steps[b]})
    return {"preset": "tiny", "device": "cpu", "backend": "cpp",
            "batch_invariant": params["batch_invariant"], "chunk": params["chunk"],
            "prompt_len": params["prompt_len"], "new_tokens": params["new_tokens"],
            "points": points, "spread": None, "check": None}


DEFAULT_ULPS = {1: 0, 2: 3000, 8: 3000, 32: 5000, 64: 9000}
STEPS = {1: 2.0, 2: 2.5, 8: 3.0, 32: 4.0, 64: 5.0}
INVARIANT_STEPS = {b: 1.5 * b for b in BATCHES}


@pytest.fixture
def lesson():
    page = BatchInvarianceLesson()
    page.service = attach(page)
    pn.panel(page).get_root()  # outside a server, drawing the page starts it
    return page


def finish_all(lesson):
    by_run = {}
    for job in lesson.service.submitted:
        if job.kind != "invariance":
            continue
        p = job.params
        if p["batch_invariant"]:
            result = planted(p, dict.fromkeys(BATCHES, 0), {}, INVARIANT_STEPS)
            by_run[INVARIANT_RUN] = result
        elif p["chunk"]:
            result = planted(p, DEFAULT_ULPS, {64: 1}, STEPS)
            by_run[CHUNKED] = result
        else:
            result = planted(p, DEFAULT_ULPS, {32: 1, 64: 3}, STEPS)
            by_run[DEFAULT] = result
        lesson.service.finish(job, result)
    return by_run


def test_it_asks_for_three_runs_of_the_invariance_job(lesson):
    jobs = [j.params for j in lesson.service.submitted if j.kind == "invariance"]
    assert len(jobs) == 3
    for params, more in zip(jobs, RUNS.values(), strict=True):
        assert params == JOBS["invariance"].normalize({**params, **more})
        assert params["batch_sizes"] == BATCHES and params["preset"] == "tiny"
        assert params["new_tokens"] == 32
    assert [(p["chunk"] > 0, p["batch_invariant"]) for p in jobs] == [
        (False, False), (True, False), (True, True)]
    assert [("invariance", JOBS["invariance"].normalize(p))
            for _, p in BatchInvarianceLesson.warm_jobs()] == [("invariance", p) for p in jobs]


def test_the_page_draws_the_measured_differences_and_the_cost(lesson):
    finish_all(lesson)
    default = lesson.tables[DEFAULT].object
    assert default.count("<tr>") == 1 + len(BATCHES)
    assert "3 of 4 (" in default and "9,000" in default and "token 5" in default
    words = lesson.verdicts[DEFAULT].object
    assert "**0 ULP** (the same bits)" in words and "from batch **2** on" in words
    assert "1 of 4 prompts at batch 32, 3 of 4 prompts at batch 64" in words
    assert "kept the same bits" in lesson.verdicts[INVARIANT_RUN].object
    # the cost: invariant / default per batch, from the two chunked runs' steps
    cost = lesson.cost.object
    for b in BATCHES:
        assert f"{INVARIANT_STEPS[b] / STEPS[b]:.1f}x" in cost
    assert f"**{INVARIANT_STEPS[64] / STEPS[64]:.1f}x**" in lesson.cost_words.object
    # at batch 64, 3 of 4 texts differ: "most prompts"
    assert PREDICTION.choices[2] in lesson.prediction_box.verdict
    asked = lesson.checkpoint.questions[-1].question
    assert asked.answer.text == "At batch 2"


def test_the_url_makes_a_smaller_run():
    page = BatchInvarianceLesson.from_url({"largest_batch": [b"8"], "new_tokens": [b"4"]})
    for _, params in page.default_jobs().values():
        assert params["batch_sizes"] == [1, 2, 8] and params["new_tokens"] == 4


def test_the_download_holds_every_seed_of_every_run(lesson):
    finish_all(lesson)
    header, rows = downloaded(lesson.download)
    assert len(rows) == sum(more["seeds"] for more in RUNS.values()) * len(BATCHES) == 45
    assert {r["run"] for r in rows} == set(RUNS)
    assert "max_ulp" in header["columns"]
