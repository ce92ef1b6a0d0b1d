"""Lesson 3 without a browser: one trace run for real under two policies; lanes drawn live from
the run's events and exactly from its trace; the per-policy table."""

from __future__ import annotations

import panel as pn
import pytest
from lesson_stubs import DEVICE, attach, downloaded, said

from engine.lab.results import ServeRunResult
from lessons.load_model import CLOSED, OPEN
from lessons.three_schedules import (
    INTRO,
    POLICIES,
    ThreeSchedulesLesson,
    lanes_rows,
    policy_summary,
)
from widgets.tables import sig

SMALL = {"requests": [b"4"], "rate": [b"40"], "max_batch": [b"2"]}
# Test-only: the page's own jobs with shorter prompts and answers, so runs take a moment.
SHORT = {"prompt_len": [8, 16], "output_len": [2, 8]}


def run_short(service, job, cached: bool = False) -> dict:
    job.params = {**job.params, **SHORT}
    return service.run_for_real(job, cached)


@pytest.fixture
def lesson():
    page = ThreeSchedulesLesson.from_url({**SMALL, "policy": [b"static"]})
    service = attach(page)
    pn.panel(page).get_root()
    return page, service


def test_nothing_runs_while_the_url_is_read():
    page = ThreeSchedulesLesson.from_url({**SMALL, "policy": [b"dynamic"]})
    service = attach(page)
    assert page.policy == "dynamic" and service.submitted == []


def test_a_run_draws_lanes_live_then_from_the_trace(lesson):
    page, service = lesson
    [job] = [j for j in service.submitted if j.kind != "info"]  # started on load
    assert job.kind == "serve_run" and job.params["policy"] == "static"
    assert job.params["requests"] == 4 and job.params["stream_tokens"] is False
    service.send(job, "started")
    # the events as the worker sends them, before the result
    events = []
    from engine.lab import worker
    result = worker.run(job.kind, {**job.params, **SHORT}, lambda t, d: events.append((t, d)),
                      lambda: False)
    # up to the run's first step: how many request events come before it depends on this
    # machine's speed against the Poisson arrivals (half the events could hold no step at all)
    live = next(i for i, (type_, _) in enumerate(events) if type_ == "step") + 1
    for type_, data in events[:live]:
        service.send(job, type_, data)
    assert page.lanes.lanes.data["id"], "lanes appear while the run happens"
    assert page.lanes.now_line.visible
    for type_, data in events[live:]:
        service.send(job, type_, data)
    service.finish(job, result)
    rows = lanes_rows(ServeRunResult.from_dict(result))
    for row in rows:
        spans = page.lanes.spans(row["id"])
        assert spans["decode"] == (row["first_token_ms"], row["finish_ms"])
    assert "static</b> batching the 4 requests waited" in page.lane_text.object
    assert any(s and s.startswith("Under static batching the 4 requests waited")
               for s in said(page))  # the same sentence, for screen readers, without tags
    assert "static" in page.table.object and "not run yet" in page.table.object


def test_the_download_is_each_lane_as_drawn(lesson):
    """Each request's moments: the lanes drawn are the spans between them; the run's record
    (policy, parameters, device, cached or fresh) in the header."""
    page, service = lesson
    result = run_short(service, service.submitted[-1], cached=True)
    head, rows = downloaded(page.download)
    assert [r["request"] for r in rows] == sorted(r["id"] for r in result["requests"])
    for r in rows:
        assert page.lanes.spans(r["request"]) == {
            part: span for part, span in (
                ("queued", (r["arrival_ms"], r["admitted_ms"])),
                ("prefill", (r["admitted_ms"], r["first_token_ms"])),
                ("decode", (r["first_token_ms"], r["finish_ms"]))) if span[1] > span[0]}
    assert head["job"] == "serve_run" and head["policy"] == "static"
    assert head["params"]["requests"] == 4 and head["params"]["max_batch"] == 2
    assert head["device"] == DEVICE and head["measured"].startswith("cached, measured")


def test_switching_policy_runs_the_same_trace_again(lesson):
    page, service = lesson
    static = run_short(service, service.submitted[-1])
    page.policy = "continuous"
    job = service.submitted[-1]
    assert job.params["policy"] == "continuous" and job.params["seed"] == static["workload"]["seed"]
    continuous = run_short(service, job, cached=True)
    arrivals = [r["arrival_s"] for r in continuous["requests"]]
    assert arrivals == [r["arrival_s"] for r in static["requests"]]  # one trace
    table = page.table.object
    assert table.count("not run yet") == 1 and "cached" in table and "measured live" in table
    assert len(page.checkpoint.questions) == len(ThreeSchedulesLesson.questions) - 1
    page.compare.clicks += 1
    assert service.submitted[-1].params["policy"] == "dynamic"
    dynamic = run_short(service, service.submitted[-1])
    # all three measured: the question on the reader's own table, keyed by their numbers
    summaries = {r["policy"]: policy_summary(ServeRunResult.from_dict(r))
                 for r in (static, continuous, dynamic)}
    best = min(POLICIES, key=lambda p: summaries[p].ttft_p95_ms)
    asked = page.checkpoint.questions[-1].question
    assert asked.prompt.startswith("In your table") and asked.answer.text == best


def test_policy_summary_reads_the_run():
    page = ThreeSchedulesLesson.from_url(SMALL)
    service = attach(page)
    pn.panel(page).get_root()
    result = run_short(service, service.submitted[-1])
    s = policy_summary(ServeRunResult.from_dict(result))
    assert s.policy == "static" and s.wait_ms >= 0 and s.run_ms > 0
    assert s.e2e_ms == pytest.approx(result["metrics"]["e2e_ms"]["mean"])
    assert 0 < s.slot_use <= 1
    # how steady its engine steps were, and whether other work disturbed it
    spread = result["spread"]
    assert spread["what"] == "engine step" and spread["p10"] <= spread["p90"]
    assert s.steps_spread == f"{sig(spread['p10'])}\u2013{sig(spread['p90'])}"
    assert s.check == ("DISTURBED: " + "; ".join(result["check"]["reasons"])
                       if result["check"]["disturbed"] else "quiet")
    page._record(ServeRunResult.from_dict(result))
    assert s.steps_spread in page.table.object and s.check.split(":")[0] in page.table.object
    requests = len(result["requests"])
    ttft = s.estimates["ttft"]  # the P95 TTFT of the run's requests, with its interval
    assert ttft.n == requests and ttft.value == pytest.approx(result["metrics"]["ttft_ms"]["p95"])
    assert ttft.bounded == (requests >= 20)  # a P95 needs 20 requests
    assert s.estimates["e2e"].lo <= s.e2e_ms <= s.estimates["e2e"].hi
    assert s.cell("ttft", s.ttft_p95_ms).endswith("\u2020" if requests < 20 else "]")
    assert s.cell("e2e", s.e2e_ms) in page.table.object


def test_warm_jobs_cover_the_three_policies():
    kinds = ThreeSchedulesLesson.warm_jobs()
    assert [p["policy"] for _, p in kinds] == list(POLICIES)


def test_closed_loop_is_offered_beside_open_loop_and_named_on_the_page():
    """Concurrent users (the "fixed" workload): the first ones arrive at once, each later
    request when one is answered, so never more than that many are in the system."""
    assert "vocabulary#open-loop" in INTRO and "vocabulary#closed-loop" in INTRO
    page = ThreeSchedulesLesson.from_url({**SMALL, "load": [b"closed"], "users": [b"2"],
                                          "policy": [b"continuous"]})
    service = attach(page)
    pn.panel(page).get_root()
    assert page._load_widgets[CLOSED].visible and not page._load_widgets[OPEN].visible
    job = service.submitted[-1]
    assert job.params["workload"] == "fixed" and job.params["concurrency"] == 2
    result = run_short(service, job)
    requests = sorted(result["requests"], key=lambda r: r["arrival_s"])
    assert [r["arrival_s"] for r in requests[:2]] == [0.0, 0.0]
    for r in requests:
        t = r["arrival_s"]
        assert sum(o["arrival_s"] <= t < o["finish_s"] for o in requests) <= 2
    assert requests[2]["arrival_s"] > 0
    assert "a closed loop of 2 concurrent users" in page.measured_on.object
    assert "continuous" in page.table.object and page.table.object.count("not run yet") == 2
    page.load = OPEN  # back to the arrival rate: its own run and its own table
    assert service.submitted[-1].params["workload"] == "poisson"
    assert service.submitted[-1].params["rate"] == 40.0
    assert page.table.object.count("not run yet") == 3
    assert page._load_widgets[OPEN].visible and not page._load_widgets[CLOSED].visible


def test_the_gpu_box_gives_the_decode_step_and_its_tokens_per_second_by_batch():
    from engine.calc.gpu_scaling import H100, LLAMA_3_8B, decode_step, step_floor_ms
    from lessons.three_schedules import gpu_finding
    text = gpu_finding([H100])
    row = text[text.index("NVIDIA H100 SXM</th>"):]
    for b in (1, 16):
        step = step_floor_ms(decode_step(LLAMA_3_8B, b, 500), H100)
        assert f"{1000 * b / step:,.0f}" in row
    assert "OSDI 2022" in text and "36.9" in text
