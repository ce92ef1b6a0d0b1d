"""Lesson 7 without a browser or an engine: the two runs it asks for, the gaps it draws live and
at the end, and its verdict."""

from __future__ import annotations

import panel as pn
from engine_stub import StubService, attach, serve_run_result

from lessons.chunked_prefill import CHUNKED, WHOLE, ChunkedPrefillLesson

SMALL = {"requests": [b"3"], "output_len": [b"40"], "long_prompt": [b"512"]}


def lesson(args=None, service=None):
    page = ChunkedPrefillLesson.from_url(args or {})
    pn.panel(page).get_root()
    return page, attach(page, service or StubService())


def test_two_runs_of_the_same_workload_whole_and_chunked():
    page, service = lesson({**SMALL, "chunk_size": [b"256"]})
    page.start()
    params = [j.params for j in service.submitted]
    assert [p["chunk_size"] for p in params] == [0, 256]
    for p in params:
        assert p["workload"] == "interference" and p["requests"] == 3
        assert p["output_len"] == [40, 40] and p["long_prompt_len"] == 512
        assert p["max_batch"] == 16 and p["long_at"] == 0.2
    assert page.long_id == 3
    defaults = ChunkedPrefillLesson.warm_jobs()
    assert [p["chunk_size"] for _, p in defaults] == [0, 128]
    assert defaults[0][1]["long_prompt_len"] == 1536 and defaults[0][1]["requests"] == 8


def test_the_verdict_compares_worst_gaps_and_the_long_ttft():
    page, _ = lesson(SMALL)
    page.start()
    assert page.timeline.worst(WHOLE) > page.timeline.worst(CHUNKED)
    assert page.results[WHOLE]["worst_ms"] == page.timeline.worst(WHOLE)
    assert page.results[CHUNKED]["prefill_steps"] == 6
    verdict = page.verdict.object
    assert "worst stall is **7.5x shorter**" in verdict
    assert "the long request paid 20.0 ms more TTFT" in verdict
    assert "long prompt arrives at 0.20 s" in page.timeline.table_html
    assert len(page.timeline.gaps(WHOLE)) == 3 * 39  # the long request's gaps are left out


def test_live_gaps_from_steps_match_the_token_times():
    page, _ = lesson(SMALL, StubService(hold={"serve_run"}))
    page.start()
    run = serve_run_result(page.run_params(0))
    steps = []
    t_prev = 0.0
    for k, t in enumerate(run["requests"][0]["token_s"]):
        prefill = [[i, 64] for i in range(3)] if k == 0 else []
        decode = [] if k == 0 else [0, 1, 2]
        steps.append({"end_s": t, "decode_ids": decode, "prefill_chunks": prefill})
        t_prev = t
    for step in steps:
        page.on_step(WHOLE, 0, step)
    gaps = page.timeline.gaps(WHOLE)
    token_s = run["requests"][0]["token_s"]
    expected = [1000 * (b - a) for a, b in zip(token_s, token_s[1:], strict=False)]
    assert sorted(gaps) == sorted(expected * 3)
    assert "s into the run" in page.status.message  # progress was reported
    assert t_prev == token_s[-1]


def test_a_new_chunk_size_runs_again():
    page, service = lesson(SMALL)
    page.start()
    page.chunk_size = 64
    assert [j.params["chunk_size"] for j in service.submitted] == [0, 128, 0, 64]
    assert "chunks of 64 tokens" in page.verdict.object
