"""Lesson 6 without a browser, on the engine's real answers (tests/lessons/in_process_service.py): the calculator, its check against the engine's real
allocation, the block tables of a run, and what fits a typed budget."""

from __future__ import annotations

import dataclasses

import panel as pn
from in_process_service import DEVICE, InProcessService, attach
from lesson_stubs import downloaded, said

from engine.config import PRESETS
from lessons.kv_cache import KVCacheLesson

CACHES = 3 * len(PRESETS)  # every preset in the engine's dtype, fp16 and fp8


def lesson(args=None, answered=True, hold=()):
    """The page drawn with the in-process service: it starts its jobs, as on load; unless
    answered, the engine holds its answers back (or those of the kinds in `hold`)."""
    page = KVCacheLesson.from_url(args or {})
    held = set(hold) if answered else {kind for kind, _ in KVCacheLesson.warm_jobs()}
    service = attach(page, InProcessService(hold=held))
    pn.panel(page).get_root()
    return page, service


def test_the_calculator_shows_public_shapes_before_the_engine_answers():
    page, _ = lesson(answered=False)
    table = page.calculator.object
    assert "Llama-2-7B" in table and "524,288 (512 KiB)" in table and "131,072" in table
    assert "327,680" in table and "tiny" not in table


def test_the_presets_agree_with_the_engines_real_allocation():
    page, service = lesson(hold={"kv_formats"})  # its sentence would follow the check's
    assert service.kinds() == ["info", "kv_allocation", "block_snapshots", "kv_formats"]
    assert "tiny" in page.calculator.object
    rows = page.agreement()
    assert len(rows) == CACHES and all(r.agrees for r in rows)
    assert f"All {CACHES} caches agree with the formula" in page.check_summary.object
    assert "tiny 3,072 bytes per token (float32)" in page.check_summary.object
    assert "2 × 6 × 2 × 32 × 4 = 3,072" in page.check.object
    assert any(s and s.startswith(f"All {CACHES} caches agree with the formula. What the engine")
               for s in said(page))


def test_a_disagreement_would_be_shown():
    page, _ = lesson()
    first, *rest = page.allocation.caches
    wrong = dataclasses.replace(first, allocated_bytes=first.allocated_bytes + 64)
    page.allocation = dataclasses.replace(page.allocation, caches=[wrong, *rest])
    page._refresh_check()
    assert f"1 of {CACHES} caches differ" in page.check_summary.object and "DIFFERS" in page.check.object


def chain(blocks: list[int]) -> str:
    return " → ".join(str(b) for b in blocks)


def test_block_tables_from_the_run():
    page, service = lesson()
    run = service.result("block_snapshots")
    snaps = [s for s in run["snapshots"] if "step" in s]
    assert page.blocks.num_blocks == run["num_blocks"] and len(snaps) > 2
    assert page.player.end == len(snaps) - 1 and not page.player.disabled
    in_use = [(len(s["seqs"]), sum(len(q["blocks"]) for q in s["seqs"])) for s in snaps]
    assert page.player.value == in_use.index(max(in_use))  # the step holding the most blocks
    for index in (page.player.value, len(snaps) - 1):
        page.player.value = index
        for seq in snaps[index]["seqs"]:
            assert chain(seq["blocks"]) in page.blocks.table_html
    owners: dict[int, set] = {}
    for snap in snaps:
        for seq in snap["seqs"]:
            for block in seq["blocks"]:
                owners.setdefault(block, set()).add(seq["id"])
    reused = sum(1 for ids in owners.values() if len(ids) > 1)
    assert reused > 0  # 10 requests through a 2 MiB pool: freed blocks serve later requests
    assert f"{reused} blocks were used by more than one request" in page.run_summary.object


def test_the_downloads_are_the_block_tables_and_the_bars():
    """Every step's block tables (the grid shows one of them: its rows are the table beside the
    grid) with the run's record; the bars' counts with the inputs they were computed from."""
    page, service = lesson()
    run = service.result("block_snapshots")
    head, rows = downloaded(page.blocks_download)
    assert len(rows) == sum(len(s["seqs"]) for s in run["snapshots"])
    shown = page.blocks.snapshot
    mine = [r for r in rows if r["step"] == shown.step]
    assert [(r["request"], r["tokens"], r["blocks"]) for r in mine] == [
        (q.id, q.tokens, " ".join(map(str, q.blocks))) for q in sorted(shown.seqs,
                                                                      key=lambda q: q.id)]
    for r in mine:
        assert " → ".join(r["blocks"].split()) in page.blocks.table_html
    assert head["job"] == "block_snapshots" and head["device"] == DEVICE
    assert head["pool"]["blocks"] == run["num_blocks"] == page.blocks.num_blocks
    assert head["measured"].startswith("fresh, measured")
    bars_head, bars = downloaded(page.bars_download)
    assert {b["layout"]: b["sequences"] for b in bars} == page.bars.counts()
    assert bars_head["params"]["budget_gb"] == page.budget_gb and "computed" in bars_head["measured"]


def test_paged_fits_more_and_bad_budgets_get_a_message():
    page, _ = lesson()
    counts = page.bars.counts()
    # Llama-3-8B, fp16: 131,072 bytes per token; 16 GB = 16e9 bytes. Full context: 8,192
    # tokens = 1.07e9 bytes each -> 14; prompt + max_tokens: 2,048 tokens = 2.68e8 -> 59;
    # paged: 1,000 tokens in 63 blocks of 16 = 1,008 tokens = 1.32e8 -> 121.
    assert counts == {"full context": 14, "prompt + max_tokens": 59, "paged": 121}
    assert "**14 sequences** reserving the full context, **59** reserving prompt" \
        in page.fit_text.object and "**121 paged**: 2.1x the prompt" in page.fit_text.object
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
    page.param.update(tokens_used=1000, reserved_tokens=500)
    assert "cannot hold a sequence of 1,000" in page.fit_error.object


def test_fp8_doubles_what_fits_and_presets_wait_for_the_engine():
    page, _ = lesson()
    fp16 = page.bars.counts()["paged"]
    page.kv_dtype = "fp8"
    assert page.bars.counts()["paged"] in (2 * fp16, 2 * fp16 + 1)
    waiting, _ = lesson({"model": [b"small"]}, answered=False)
    assert "Waiting for the engine" in waiting.fit_text.object


def test_the_budget_from_the_url_is_checked_like_a_typed_one():
    page, _ = lesson({"budget_gb": [b"-3"]}, answered=False)
    assert page.budget_gb == -3 and "more than 0 GB" in page.fit_error.object


def test_the_prediction_and_the_question_use_the_engines_own_numbers():
    page, service = lesson()
    assert page.prediction_box.verdict.startswith("Measured: Yes: blocks a request frees")
    row = next(r for r in service.result("kv_allocation")["caches"] if r["engine_dtype"])
    asked = page.checkpoint.questions[-1].question
    per_token = row["allocated_bytes"] / row["capacity_tokens"]
    assert asked.answer.text == f"{per_token:,.0f} bytes"
    assert per_token == 2 * row["layers"] * row["kv_heads"] * row["head_dim"] * \
        row["element_bytes"]


def test_the_formats_section_shows_the_engines_measurement_and_the_gpu_box_the_formulas():
    page, _ = lesson()
    r = page.kv_formats
    assert r is not None
    tables = page.formats.object
    # tiny: a float32 block 2 x 6 x 2 x 32 x 4 x 16 = 49,152 bytes; fp8 12,288 + 96 of scales
    assert "49,152" in tables and "12,384" in tables
    by = {f.kv_dtype: f for f in r.formats}
    assert by["fp8"].blocks > 3.9 * by["float32"].blocks  # a quarter of the bytes a block
    assert by["fp8"].requests_fit > by["float32"].requests_fit
    assert "95% CI" in tables and "top token" in tables
    rows = downloaded(page.formats_download)[1]
    hybrid = {(x["preset"], x["tokens"]): x for x in rows if x["table"] == "hybrid"}
    full, win = hybrid[("tiny", 2048)], hybrid[("tiny-hybrid", 2048)]
    assert win["requests_fit"] > full["requests_fit"]
    assert win["bytes_per_token"] < full["bytes_per_token"] == 3072
    assert "1,792" in tables  # tokens beyond the 256-token window at 2,048
    assert any(s and s.startswith("The KV formats measured: in 64 MiB") for s in said(page))
    box = page.gpu_box.text
    assert "131,072 bytes per token" in box and "NVIDIA H200" in box and "141 GB" in box
