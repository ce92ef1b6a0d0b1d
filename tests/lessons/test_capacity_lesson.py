"""Lesson 12 without a browser, on real runs of the tiny model (tests/lessons/in_process_service.py):
lesson 4's batch points at the reader's lengths, the plan drawn from them (batch, replicas,
Little's law, cost), the load test that checks it at the planned rate per replica and batch, the
verdict recounted from the run's requests, the prediction and the question on the reader's plan;
a new price re-plans with no run, a new rate re-runs only the check, a target out of reach gives
no plan and no check; lesson 8's rate sweep of the planned batch, where the cache holds one,
joins the plan, and where it does not the plan says so and links to it."""

from __future__ import annotations

import json

import panel as pn
from in_process_service import InProcessService, attach, run_job
from lesson_stubs import downloaded

from engine.calc.batch_ladder import LADDER
from engine.calc.deployment import measured_rate, plan, request_latencies
from engine.calc.kv_math import format_bytes
from engine.calc.rate_sweep import default_sweep_params
from engine.lab import registry
from engine.lab.worker import plain
from lessons.capacity import CapacityLesson
from lessons.capacity_findings import check_verdict, outcome, points_from
from lessons.teaching import service_lookup
from lessons.words.capacity import NONE, problems_html, worked_problems
from widgets.tables import sig

# short requests at a high rate: the check's load test serves them in about a second
SMALL = {"prompt_len": [b"16"], "output_len": [b"4"], "rate": [b"200"]}


class WithCache(InProcessService):
    """The in-process service with a measurement cache that answers `cached` (what the real
    service's cache would hold after the reader ran lesson 8), recording what was asked."""

    def __init__(self, records: dict | None = None):
        super().__init__()
        self.records, self.asked = records or {}, []

    def cached(self, kind, params):
        key = json.dumps([kind, registry.normalize(kind, params)], sort_keys=True)
        self.asked.append(key)
        return self.records.get(key)


def lesson(args=None, service=None):
    page = CapacityLesson.from_url(SMALL if args is None else args)
    service = attach(page, service)
    pn.panel(page).get_root()
    service.submitted = [j for j in service.submitted if j.kind != "info"]  # the GPU box's
    return page, service


def test_the_plan_comes_from_lesson_4s_points_and_a_load_test_checks_it():
    page, service = lesson()
    points = [j for j in service.submitted if j.kind == "sweep_point"]
    assert [j.params["batch_size"] for j in points] == list(LADDER)
    assert all(j.params["prompt_len"] == 16 and j.params["new_tokens"] == 4 for j in points)
    p = page.current
    assert p == plan(points_from(page.results), p.demand, p.targets) and p.feasible
    assert page.points.object.count("<tr>") == 1 + len(LADDER)
    assert f"{p.batch} (the plan)" in page.points.object
    text = page.plan_pane.object
    assert f"{p.replicas} replica" in text and f"at batch {p.batch}" in text
    assert f"= {sig(p.e2e_ms)} ms" in text and f"{sig(p.replica_rps)} requests/s" in text
    assert f"**${sig(p.cost_per_million(1.0))}**" in text
    assert f"held {format_bytes(page.results[p.batch].kv_bytes)} of KV cache" in text
    # the check: one replica's share of the demand at the planned batch and lengths
    [check] = [j for j in service.submitted if j.kind == "load_test"]
    assert check.params["rate"] == round(200.0 / p.replicas, 3)
    assert check.params["max_batch"] == p.batch and check.params["users"] == 0
    assert check.params["short_prompt"] == [16, 16] and check.params["short_output"] == [4, 4]
    assert check.params["long_share"] == 0.0
    run = page.check_run.result
    lat = request_latencies(run)
    assert len(lat) == check.params["requests"]
    good = sum(a <= p.targets.ttft_ms and (b is None or b <= p.targets.tpot_ms) for a, b in lat)
    held, words = check_verdict(run, p.targets)
    assert held is (good >= 0.95 * len(lat))
    assert f"{good} of {len(lat)} requests" in page.check_pane.object
    assert page.check_pane.object == words
    # the prediction and the question on the reader's own plan
    assert f"Measured: {outcome(p, points_from(page.results))}" in page.prediction_box.verdict
    asked = page.checkpoint.questions[-1].question
    assert asked.answer.text == f"{sig(p.replica_rps)} requests/s"
    assert len(asked.choices) >= 3
    assert "Llama-3-8B" in page.gpu_box.text and "tensor parallel" in page.gpu_box.text


def test_a_price_replans_without_a_run_and_a_rate_reruns_only_the_check():
    page, service = lesson()
    before = len(service.submitted)
    page.price_per_hour = 3.0
    assert len(service.submitted) == before
    assert f"**${sig(page.current.cost_per_million(3.0))}**" in page.plan_pane.object
    page.rate = 400.0
    new = service.submitted[before:]
    assert [j.kind for j in new] == ["load_test"]
    assert new[0].params["rate"] == round(400.0 / page.current.replicas, 3)


def test_a_target_out_of_reach_gives_no_plan_and_no_check():
    page, service = lesson({**SMALL, "tpot_target_ms": [b"0.1"]})
    assert not page.current.feasible
    assert "load_test" not in [j.kind for j in service.submitted]
    assert "**No plan on this machine:** even batch" in page.plan_pane.object
    assert "no plan to check" in page.check_pane.object
    assert f"Measured: {NONE} (even batch" in page.prediction_box.verdict


def test_the_download_is_the_points_table_with_the_plans_choice():
    page, _ = lesson()
    header, rows = downloaded(page.download)
    assert [r["batch"] for r in rows] == list(LADDER)
    assert [r["batch"] for r in rows if r["planned"]] == [page.current.batch]
    for row in rows:
        point = page.results[row["batch"]]
        assert (row["ttft_ms"], row["tpot_ms"]) == (point.ttft_ms, point.tpot_ms)
    assert header["job"] == "sweep_point, load_test" and "check" in header["params"]
    assert "Little's law" in header["columns"]


def test_the_answer_key_follows_the_problems():
    problems, answers = worked_problems()
    assert len(problems) == len(answers) == 5
    key = problems_html()
    assert "<strong>30 requests</strong>" in key  # 12 /s x 2.5 s
    assert "<strong>5</strong>" in key  # ceil(12 / (0.8 x 16 / 5.125 s))
    assert "<strong>$1.45 per million</strong>" in key  # 5 x $2.50 / 3600 x 1e6 / 2,400 tokens/s


def test_the_default_view_warms_lesson_4s_points():
    assert [p for _, p in CapacityLesson.warm_jobs()] == [
        {"preset": "tiny", "batch_size": b, "prompt_len": 64, "new_tokens": 32} for b in LADDER]


def test_without_lesson_8s_sweep_the_plan_says_it_rests_on_lesson_4_and_links_to_lesson_8():
    page, service = lesson(service=WithCache())
    p = page.current
    assert p.measured is None and p.replicas == p.replicas_from_points
    asked = {json.dumps(["rate_sweep", registry.normalize(
        "rate_sweep", default_sweep_params(b))], sort_keys=True) for b in LADDER}
    assert asked <= set(service.asked)  # lesson 8's own job at each ladder batch, nothing run
    assert "rate_sweep" not in service.kinds()
    text = page.plan_pane.object
    assert "**Where each number came from**" in text and "batch points measured as in lesson 4" in text
    assert f"*not measured.* Lesson 8's rate sweep at a batch limit of {p.batch}" in text
    assert f'<a href="app?lesson=slo-goodput&max_batch={p.batch}">' in text


def test_lesson_8s_sweep_of_the_planned_batch_joins_the_plan():
    batch = lesson()[0].current.batch
    # a real sweep of the planned batch limit (short requests, two rates), held by the cache
    # under lesson 8's job at that batch limit, as if the reader had run lesson 8 there
    _, result = run_job("rate_sweep", registry.normalize("rate_sweep", {
        "rates": [25.0, 400.0], "requests": 8, "runs": 1, "prompt_len": [16, 16],
        "output_len": [4, 4], "max_batch": batch}))
    key = json.dumps(["rate_sweep", registry.normalize(
        "rate_sweep", default_sweep_params(batch))], sort_keys=True)
    record = {"result": plain(result), "device": "cpu", "measured_at": "in this test"}
    page, service = lesson(service=WithCache({key: record}))
    p = page.current
    sweep = service_lookup(service)("rate_sweep", default_sweep_params(batch))
    assert p.batch == batch and p.measured == measured_rate(sweep.result, p.targets)
    text = page.plan_pane.object
    assert f"lesson 8's rate sweep at a batch limit of {batch}, the plan's batch" in text
    assert "measured in this test" in text and "*not measured.*" not in text
    assert ("prompts of 16-16 tokens and answers of 4-4, arriving at random at "
            f"{sig(25.0)}, {sig(400.0)} requests/s") in text
    if p.measured is not None:
        assert p.replicas == max(p.replicas_from_points, p.replicas_from_load)
        assert f"**{sig(p.measured.rate_rps)} requests/s**" in text
        assert f"= {p.replicas_from_load} replicas, against {p.replicas_from_points}" in text
    else:
        assert "even at its lowest rate" in text
    [check] = [j for j in service.submitted if j.kind == "load_test"]
    assert check.params["rate"] == round(200.0 / p.replicas, 3)


def test_the_keys_are_not_the_shortest_choice_of_every_question():
    """A reader who always picks the shortest choice should not pass: in at most one of the
    fixed questions is the key the shortest, and in at most half the longest."""
    from lessons.words.capacity import QUESTIONS
    from widgets.content import Question

    fixed = [q for q in QUESTIONS if isinstance(q, Question)]
    shortest = sum(len(q.answer.text) < min(len(c.text) for c in q.choices if not c.correct)
                   for q in fixed)
    longest = sum(len(q.answer.text) > max(len(c.text) for c in q.choices if not c.correct)
                  for q in fixed)
    assert len(fixed) >= 4 and shortest <= 1 and longest <= len(fixed) // 2



def test_the_prediction_names_the_target_that_stops_a_larger_batch():
    from engine.calc.deployment import BatchPoint, Demand
    from engine.calc.slo_math import Targets
    from lessons.words.capacity import BY_TPOT, BY_TTFT, NEITHER, NONE

    points = [BatchPoint(1, 10.0, 20.0), BatchPoint(4, 30.0, 40.0), BatchPoint(16, 300.0, 60.0)]
    demand = Demand(10.0, 64, 32)
    for targets, expected in ((Targets(1000.0, 50.0), BY_TPOT), (Targets(100.0, 100.0), BY_TTFT),
                              (Targets(1000.0, 100.0), NEITHER), (Targets(1000.0, 10.0), NONE)):
        assert outcome(plan(points, demand, targets), points) == expected, targets
