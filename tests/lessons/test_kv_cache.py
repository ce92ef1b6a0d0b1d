"""Lesson 6 without a browser or an engine: the calculator, its check against the engine's real
allocation, the block tables of a run, and what fits a typed budget."""

from __future__ import annotations

import panel as pn
from engine_stub import StubService, attach

from lessons.kv_cache import KVCacheLesson


def lesson(args=None, service=None, start=True):
    page = KVCacheLesson.from_url(args or {})
    pn.panel(page).get_root()
    service = attach(page, service or StubService())
    if start:
        page.start()
    return page, service


def test_the_calculator_shows_public_shapes_before_the_engine_answers():
    page, _ = lesson(start=False)
    table = page.calculator.object
    assert "Llama-2-7B" in table and "524,288 (512 KiB)" in table and "131,072" in table
    assert "327,680" in table and "tiny" not in table


def test_the_presets_agree_with_the_engines_real_allocation():
    page, service = lesson()
    assert service.kinds() == ["info", "kv_allocation", "block_snapshots"]
    assert "tiny" in page.calculator.object
    rows = page.agreement()
    assert len(rows) == 9 and all(r["agrees"] for r in rows)
    assert "All 9 caches agree with the formula" in page.check_summary.object
    assert "tiny 3,072 bytes per token (float32)" in page.check_summary.object
    assert "2 × 6 × 2 × 32 × 4 = 3,072" in page.check.object


def test_a_disagreement_would_be_shown():
    page, _ = lesson()
    page.allocation["caches"][0]["allocated_bytes"] += 64
    page._refresh_check()
    assert "1 of 9 caches differ" in page.check_summary.object and "DIFFERS" in page.check.object


def test_block_tables_from_the_run():
    page, _ = lesson()
    assert page.blocks.num_blocks == 40 and page.player.end == 2 and not page.player.disabled
    assert page.player.value == 1  # the step holding the most blocks
    assert "0 → 1" in page.blocks.table_html and "2 → 3 → 4" in page.blocks.table_html
    page.player.value = 2
    assert "0 → 1 → 5" in page.blocks.table_html
    assert "2 blocks were used by more than one request" in page.run_summary.object


def test_paged_fits_more_and_bad_budgets_get_a_message():
    page, _ = lesson()
    counts = page.bars.counts()
    assert counts["paged"] > counts["contiguous"] > 0
    assert "16 GB holds **14 sequences reserved contiguously**" in page.fit_text.object
    page.budget_gb = 0
    assert page.fit_error.visible and "more than 0 GB" in page.fit_error.object
    assert page.bars.counts() == {}
    page.budget_gb = -4
    assert "more than 0 GB" in page.fit_error.object
    page.budget_gb = None
    assert page.fit_error.visible
    page.budget_gb = 80
    assert not page.fit_error.visible and page.bars.counts()["paged"] > 0
    page.param.update(model="Llama-2-7B", tokens_used=5000)
    assert "at most 4,096 tokens" in page.fit_error.object


def test_fp8_doubles_what_fits_and_presets_wait_for_the_engine():
    page, _ = lesson()
    fp16 = page.bars.counts()["paged"]
    page.kv_dtype = "fp8"
    assert page.bars.counts()["paged"] in (2 * fp16, 2 * fp16 + 1)
    waiting, _ = lesson({"model": [b"small"]}, start=False)
    assert "Waiting for the engine" in waiting.fit_text.object


def test_the_budget_from_the_url_is_checked_like_a_typed_one():
    page, _ = lesson({"budget_gb": [b"-3"]}, start=False)
    assert page.budget_gb == -3 and "more than 0 GB" in page.fit_error.object
