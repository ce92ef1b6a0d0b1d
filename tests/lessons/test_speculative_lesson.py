"""Lesson 10 without a browser: the runs it asks for (plain, prompt lookup and the draft model at
the reader's batch, plain and prompt lookup at batch 1, 4 and 16, each once), the table beside
the formula, the same text as plain decoding, the prediction's verdict from batch 1 and the
question on the reader's runs, on real runs of the tiny model and the shipped draft."""

from __future__ import annotations

import re

import panel as pn
import pytest
from in_process_service import attach
from lesson_stubs import downloaded, said

from engine.calc.gpu_scaling import GPUS
from engine.speculative import expected_tokens_per_step
from lessons.speculative import BATCHES, METHODS, SpeculativeLesson, gpu_finding, speed_outcome
from widgets.tables import sig


def lesson(args=None):
    page = SpeculativeLesson.from_url(args or {})
    service = attach(page)
    pn.panel(page).get_root()
    service.submitted = [j for j in service.submitted if j.kind != "info"]  # the GPU box's
    return page, service


def test_each_run_is_asked_for_once():
    page, service = lesson({"k": [b"3"], "batch_size": [b"4"]})
    wanted = [(j.params["batch_size"], j.params["method"]) for j in service.submitted]
    assert wanted == [(4, "off"), (4, "ngram"), (4, "draft"), (1, "off"), (1, "ngram"),
                      (16, "off"), (16, "ngram")]
    assert all(j.params["k"] == 3 and j.params["new_tokens"] == 64 for j in service.submitted)
    assert len(SpeculativeLesson.warm_jobs()) == 3 + 2 * (len(BATCHES) - 1)


def test_the_table_puts_tokens_per_step_beside_the_formula_and_the_text_is_plain_decodings():
    page, _ = lesson({"k": [b"3"]})
    rows = page.rows(1)
    assert set(rows) == {"off", "ngram", "draft"}
    for m in ("ngram", "draft"):
        r, run = rows[m], page.by_batch[1][m]
        assert r.same_text and run.output_ids == page.by_batch[1]["off"].output_ids
        assert 1.0 <= r.tokens_per_step <= 4.0
        assert r.formula is not None
        assert r.tokens_per_step == run.tokens_per_step
        assert run.expected_tokens_per_step_at_k == expected_tokens_per_step(run.alpha, 3)
        assert sig(r.tokens_per_step) in page.table.object
    assert "DIFFERENT" not in page.table.object and "DIFFERENT" not in page.verdict.object
    assert page.table.object.count("<tr>") == 1 + 3
    for m, r in rows.items():  # TPOT: the mean of the 63 gaps, with its block-bootstrap interval
        assert r.tpot.n == 63 and r.tpot.value == pytest.approx(r.tpot_ms)
        assert r.tpot.lo <= r.tpot.value <= r.tpot.hi
        assert f"{sig(r.tpot_ms)} [{sig(r.tpot.lo)}–{sig(r.tpot.hi)}]" in page.table.object, m
    for batch in BATCHES:
        plain = page.by_batch[batch]["off"]
        assert f"<th scope=\"row\">{batch}</th>" in page.batch_table.object
        assert sig(plain.tpot_ms) in page.batch_table.object
    choice, detail = speed_outcome(rows)
    assert f"Measured: {choice} ({detail})" in page.prediction_box.verdict
    asked = page.checkpoint.questions[-1].question
    a, b = rows["ngram"].tokens_per_step, rows["draft"].tokens_per_step
    assert asked.answer.text == ("Prompt lookup" if a > 1.05 * b else "The draft model"
                                 if b > 1.05 * a else "About the same (within 5%)")
    # the status region speaks each run at the reader's batch in words (now, or after the
    # live region's gap if it spoke less than two seconds ago)
    page.announce_run("off", cached=False)
    plain = f"Plain decoding at batch 1 measured: TPOT {sig(rows['off'].tpot_ms)} ms."
    assert plain in said(page)
    page.announce_run("ngram", cached=True)
    r = rows["ngram"]
    words = (f"Prompt lookup at batch 1 from the cache: TPOT {sig(r.tpot_ms)} ms, "
             f"{sig(r.tokens_per_step)} tokens per target step, "
             f"{r.over_plain:.2f}x plain decoding's TPOT.")
    assert words in said(page)


def test_the_download_holds_every_run_of_both_tables_with_its_counts():
    page, _ = lesson({"k": [b"3"]})
    header, rows = downloaded(page.download)
    assert len(rows) == sum(len(runs) for runs in page.by_batch.values()) == 3 + 2 * 2
    for r in rows:
        run = page.by_batch[r["batch"]][next(m for m, name in METHODS.items()
                                             if name == r["decoding"])]
        assert (r["tpot_ms"], r["target_steps"], r["tokens_per_step"]) == (
            run.tpot_ms, run.target_steps, run.tokens_per_step)
        assert r["same_text_as_plain"] is (run.output_ids == page.by_batch[r["batch"]]["off"]
                                           .output_ids)
    assert header["job"] == "speculative" and "prompt lookup, batch 16" in header["params"]


def cells(table: str, row: str) -> list[str]:
    """The text of each cell of the table's row whose header is `row`."""
    start = table.index(f'<th scope="row">{row}</th>')
    body = table[start:table.index("</tr>", start)]
    return re.findall(r'<td[^>]*>([^<]*)</td>', body)


def test_the_tables_acceptance_is_the_formulas_input():
    """The column named as the formula's input shows a = accepted / (accepted + rejections):
    the formula at that figure gives the engine's, and at the share of guesses kept it would
    not (the two differ whenever a step rejects a guess)."""
    page, _ = lesson({"k": [b"3"]})
    heads = re.findall(r'<th scope="col">([^<]*)</th>', page.table.object)[1:]
    a_col = next(i for i, h in enumerate(heads) if "the formula's input" in h)
    kept_col = heads.index("share of guesses kept")
    for m in ("ngram", "draft"):
        run, r = page.by_batch[1][m], page.rows(1)[m]
        row = cells(page.table.object, METHODS[m])
        assert r.alpha == run.alpha and r.kept == run.acceptance_rate
        assert row[a_col] == f"{run.alpha:.2f}"
        assert row[kept_col] == f"{100 * run.acceptance_rate:.0f}%"
        shown = float(row[a_col])
        assert expected_tokens_per_step(shown, 3) == pytest.approx(
            run.expected_tokens_per_step_at_k, abs=0.02 * 3)
        if run.alpha < 1 and run.acceptance_rate < run.alpha - 0.05:
            assert expected_tokens_per_step(run.acceptance_rate, 3) < \
                run.expected_tokens_per_step_at_k - 0.01


def test_the_gpu_box_gives_where_a_step_stops_being_memory_bound():
    text = gpu_finding(list(GPUS))
    assert "smallest batch that is compute-bound, 500 tokens cached" in text
    assert "memory-bound at any batch" in text  # 8,000 tokens of Llama-3-8B never reach the ridge
    assert "MagicDec" in text
