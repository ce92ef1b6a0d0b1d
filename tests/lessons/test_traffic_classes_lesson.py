"""Lesson 16 without a browser, on a planted result of the traffic_classes job (the job itself
runs for real in tests/engine/lab/test_traffic_job.py): the job it asks for, the table of each
group in each run, the three findings, the prediction's verdict, the question on the reader's
numbers and the download."""

from __future__ import annotations

import panel as pn
from lesson_stubs import attach, downloaded, said

from engine.lab.results import parse_result
from lessons.traffic_classes import TrafficClassesLesson, findings, run_stats


def request(i, cls, tenant, arrival, first, finish, tokens):
    step = (finish - first) / max(tokens - 1, 1)
    return {"id": i, "arrival_s": arrival, "admitted_s": arrival, "first_token_s": first,
            "finish_s": finish, "prompt_len": 20, "output_len": tokens,
            "token_s": [first + k * step for k in range(tokens)], "preemptions": 0,
            "traffic_class": cls, "tenant": tenant}


def planted_run(name, chat_wait, batch_finish, flood_wait=None):
    """Two batch requests (10 tokens each) at t = 0, four chat requests waiting chat_wait s for
    their first token, and in the flood runs four flooding requests."""
    reqs = [request(0, "batch", "batchjob", 0.0, 1.0, batch_finish, 10),
            request(1, "batch", "batchjob", 0.0, 1.5, batch_finish, 10)]
    for k in range(4):
        t = 0.5 + k
        reqs.append(request(2 + k, "interactive", f"user{k}", t, t + chat_wait * (k + 1) / 4,
                            t + chat_wait + 0.5, 5))
    if flood_wait is not None:
        for k in range(4):
            reqs.append(request(6 + k, "interactive", "flood", 0.2, 0.2 + flood_wait, 6.0, 5))
    return {"name": name, "classes": None if name == "fifo" else "interactive;batch",
            "flood_requests": 4 if flood_wait is not None else 0, "duration_s": 6.0,
            "requests": reqs}


RESULT = {
    "device": "cpu", "preset": "tiny", "weights": "trained", "max_batch": 4, "chunk_size": 128,
    "workload": {"kind": "mix", "chat_requests": 4, "chat_rate": 1.0, "chat_prompt": [16, 48],
                 "chat_output": [8, 16], "users": 4, "batch_requests": 2,
                 "batch_prompt": [384, 512], "batch_output": [24, 40], "flood_requests": 4,
                 "flood_rate": 10.0, "seed": 0},
    "lanes": "interactive;batch", "quota": "interactive:tenant_rate=150;batch",
    "runs": [planted_run("fifo", 2.0, 5.0), planted_run("lanes", 0.4, 5.0),
             planted_run("flood", 1.6, 5.0, 0.1), planted_run("quota", 0.5, 5.0, 3.0)],
    "spread": None, "check": None}


def lesson(args=None):
    page = TrafficClassesLesson.from_url(args or {})
    service = attach(page)
    pn.panel(page).get_root()
    return page, service


def test_it_asks_for_one_job_at_the_readers_chat_rate():
    _, service = lesson({"chat_rate": [b"8"], "chat_requests": [b"6"]})
    (job,) = service.submitted
    assert job.kind == "traffic_classes" and job.params["chat_rate"] == 8.0
    assert job.params["chat_requests"] == job.params["flood_requests"] == 6
    ((kind, params),) = TrafficClassesLesson.warm_jobs()
    assert kind == "traffic_classes" and params["chat_requests"] == 16


def test_the_page_draws_each_group_and_what_lanes_and_the_quota_change():
    page, service = lesson()
    service.finish(service.submitted[0], RESULT)
    result = parse_result("traffic_classes", RESULT)
    f = findings({r.name: run_stats(r) for r in result.runs})
    # the chat users' P99 TTFT: the last of four waits, 2.0 s in one queue, 0.4 s with lanes
    assert f.chat_p99[0] > 1900 and f.chat_p99[1] < 410
    assert f.gain < 0.25 and f.batch_pays == 1.0 and f.quota_protects < 0.35
    table = page.table.object
    assert table.count("<tr>") == 1 + 2 + 2 + 3 + 3  # flood runs add the flooding tenant
    assert "flooding tenant" in table and "\u2020" in table  # 4 requests cannot bound a P99
    assert "<code>interactive:tenant_rate=150;batch</code>" in table
    verdict = page.verdict.object
    assert "What the chat users gain" in verdict and "What the quota protects" in verdict
    # same batch throughput both ways: "About the same"
    assert page.prediction_box.measured.startswith("About the same")
    (question,) = [q.question for q in page.checkpoint.questions if "your runs" in q.question.prompt]
    assert question.answer.text == "It fell to under half"
    assert any("four runs" in s for s in said(page) if s)
    header, rows = downloaded(page.download)
    assert len(rows) == 10 and {r["run"] for r in rows} == {"fifo", "lanes", "flood", "quota"}
    assert header["job"] == "traffic_classes"
