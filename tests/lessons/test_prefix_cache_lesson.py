"""Lesson 9 without a browser: the two runs it asks for (cache off and on, the same requests), the
TTFT table, the block strip, the verdict, the prediction's verdict and the question on the
reader's run, on real runs of the tiny model (tests/lessons/in_process_service.py)."""

from __future__ import annotations

import panel as pn
from in_process_service import attach
from lesson_stubs import downloaded, said

from lessons.prefix_cache import (
    OFF,
    ON,
    PrefixCacheLesson,
    RunSummary,
    cache_outcome,
    cached_question,
    summarize,
)
from widgets.tables import sig

SMALL = {"shared_prefix": [b"200"], "requests": [b"3"]}


def lesson(args=None):
    page = PrefixCacheLesson.from_url(args or {})
    service = attach(page)
    pn.panel(page).get_root()
    service.submitted = [j for j in service.submitted if j.kind != "info"]  # the GPU box's
    return page, service


def test_two_runs_of_the_same_requests_cache_off_and_on():
    page, service = lesson(SMALL)
    params = [j.params for j in service.submitted]
    assert [p["prefix_cache"] for p in params] == [False, True]
    for p in params:
        assert p["shared_prefix_len"] == 200 and p["requests"] == 3 and p["output_len"] == 4
    defaults = PrefixCacheLesson.warm_jobs()
    assert [p["shared_prefix_len"] for _, p in defaults] == [1024, 1024]
    assert [p["prefix_cache"] for _, p in defaults] == [False, True]


def test_the_page_shows_what_the_cache_gave_each_request():
    page, _ = lesson(SMALL)
    off, on = page.runs[OFF], page.runs[ON]
    assert [r.cached_tokens for r in on.requests] == [0, 192, 192]  # 12 full 16-token blocks
    assert all(r.cached_tokens == 0 for r in off.requests)
    assert [r.prompt_tokens for r in on.requests] == [r.prompt_tokens for r in off.requests]
    for run in (off, on):
        for r in run.requests:
            assert sig(r.ttft_ms) in page.ttft.object
    assert page.blocks.object.count('class="blk hit"') == 2 * 12
    total_blocks = sum(-(-r.prompt_tokens // 16) for r in on.requests)
    assert page.blocks.object.count('class="blk ') == total_blocks
    verdict = page.verdict.object
    assert f"the later ones' **{sig(on.later_ttft_ms)} ms** on average (95% interval " in verdict
    later = summarize(on).later  # the later 2 requests' mean TTFT, with its interval
    assert later.n == 2 and later.lo <= on.later_ttft_ms <= later.hi
    assert f"{sig(later.lo)}–{sig(later.hi)} ms, 2 requests)" in verdict
    ratio = off.later_ttft_ms / on.later_ttft_ms
    assert f"**{ratio:.1f}x sooner**" in verdict
    assert f"384 of the {sum(r.prompt_tokens for r in on.requests):,} prompt tokens of all 3 " \
           "requests" in verdict
    choice, detail = cache_outcome(summarize(off), summarize(on))
    assert f"Measured: {choice} ({detail})" in page.prediction_box.verdict
    # the status region speaks each run in words (now, or after the live region's gap)
    page.announce_run(OFF, cached=False)
    assert (f"Cache off measured: first request's TTFT {sig(off.first_ttft_ms)} ms, the later "
            f"ones' {sig(off.later_ttft_ms)} ms; with the cache the later requests' first token "
            f"came {ratio:.1f}x sooner.") in said(page)
    asked = page.checkpoint.questions[-1].question
    assert asked.answer.text == "192 tokens"
    assert {c.text for c in asked.choices} >= {"192 tokens", "200 tokens", "0 tokens"}
    assert "Llama-3-8B" in page.gpu_box.text and "200 shared tokens" in page.gpu_box.text


def test_the_prediction_follows_the_ratio_of_the_later_requests_ttft():
    def run(later):
        return RunSummary(first_ms=100.0, later_ms=later, cached_tokens=0, prompt_tokens=1,
                          hit_rate=None, device="cpu")
    assert cache_outcome(run(90.0), run(20.0))[0] == "Several times shorter (3x or more)"
    assert cache_outcome(run(90.0), run(60.0))[0] == "Somewhat shorter (up to 3x)"
    assert cache_outcome(run(90.0), run(85.0))[0] == "About the same"


def test_no_question_on_a_run_without_a_shared_prompt():
    page, _ = lesson({"shared_prefix": [b"0"], "requests": [b"2"]})
    assert cached_question(page.runs[ON]) is None
    assert all(r.cached_tokens == 0 for r in page.runs[ON].requests)


def test_the_download_is_the_ttft_table_with_both_runs_named():
    page, _ = lesson(SMALL)
    header, rows = downloaded(page.download)
    assert [(r["run"], r["request"]) for r in rows] == [(n, i) for n in (OFF, ON)
                                                        for i in (1, 2, 3)]
    for row in rows:
        r = page.runs[row["run"]].requests[row["request"] - 1]
        assert (row["ttft_ms"], row["cached_tokens"]) == (r.ttft_ms, r.cached_tokens)
    assert header["job"] == "prefix_cache" and set(header["params"]) == {OFF, ON}
    assert header["params"][ON]["prefix_cache"] is True and "cached" in header["columns"]
