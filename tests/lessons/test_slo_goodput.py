"""Lesson 8 without a browser, on real rate sweeps of the tiny model
(tests/lessons/in_process_service.py): the rate sweep it asks for, goodput judged against
the typed targets without a new run, the cost of a million tokens, and the two uses."""

from __future__ import annotations

import panel as pn
import pytest
from in_process_service import InProcessService, attach
from lesson_stubs import said

from engine.calc.slo_math import cost_per_million_tokens
from lessons.capacity_search import capacity_ttft
from lessons.slo_goodput import SLOGoodputLesson
from widgets.tables import UNBOUNDED, sig

SMALL = {"points": [b"3"], "requests": [b"8"], "max_rate": [b"8"], "runs": [b"1"]}


def lesson(args=None, answered=True):
    """The page drawn with the in-process service: it starts its sweep, as on load; unless
    answered, the engine holds its answers back."""
    page = SLOGoodputLesson.from_url(args or {})
    service = attach(page, InProcessService(hold=set() if answered else {"rate_sweep"}))
    pn.panel(page).get_root()
    service.submitted = [j for j in service.submitted if j.kind != "info"]  # the GPU box's
    return page, service


def good_requests(point: dict, ttft_ms=200, tpot_ms=100) -> int:
    """Requests within the default chat limits, counted here from the raw per-request figures
    (vLLM's --goodput rule: TTFT and TPOT each within its limit; no TPOT meets any limit)."""
    return sum(1 for a, b in zip(point["ttft_ms"], point["tpot_ms"], strict=True)
               if a <= ttft_ms and (b is None or b <= tpot_ms))


def test_the_sweep_and_goodput_at_or_below_throughput():
    page, service = lesson(SMALL)
    [job] = service.submitted
    assert job.params["rates"] == [2, 4, 8] and job.params["max_batch"] == 8
    raw = {p["rate"]: p for p in job.result["points"]}
    points = page.curve.points()
    assert [p["rate"] for p in points] == [2, 4, 8]
    for p in points:
        r = raw[p["rate"]]
        assert p["completed_rps"] == pytest.approx(8 / r["duration_s"])
        assert p["goodput_rps"] == pytest.approx(good_requests(r) / r["duration_s"])
        assert p["goodput_rps"] <= p["completed_rps"]
        assert p["goodput_tok_s"] <= p["throughput_tok_s"]
        assert p["throughput_tok_s"] == pytest.approx(sum(r["output_len"]) / r["duration_s"])
    assert "Best goodput" in page.goodput_summary.object
    assert any(s and s.startswith("Best goodput: ") and "**" not in s for s in said(page))
    assert "P50 TTFT (limit 200 ms)" in page.checks.object
    assert "P99 TPOT (limit 100 ms)" in page.checks.object
    cells = page.checks.object.split("</caption>")[1]  # a mark per percentile per limit per rate
    assert cells.count("✓") + cells.count("✗") == 3 * 4
    top = raw[8]
    good = good_requests(top)
    assert f"{100 * good / 8:.0f}% ({good} of 8)" in cells  # SLO attainment at the top rate


def test_each_rate_is_run_again_and_its_points_carry_intervals_over_the_runs():
    """Two runs a rate, each of other requests (seed, seed + 1): a point is all its runs'
    requests or tokens over all their seconds, with a 95% interval over the runs
    (runs_estimate), drawn and downloaded; its percentiles pool the runs' requests."""
    import json

    page, service = lesson({"points": [b"2"], "requests": [b"6"], "max_rate": [b"16"],
                            "runs": [b"2"]})
    [job] = service.submitted
    assert job.params["runs"] == 2 and job.params["rates"] == [8, 16]
    raw = job.result["points"]
    assert [(p["rate"], p["run"]) for p in raw] == [(8, 1), (8, 2), (16, 1), (16, 2)]
    assert raw[0]["output_len"] != raw[1]["output_len"]  # other requests in the second run
    points = page.curve.points()
    assert [p["rate"] for p in points] == [8, 16]
    for p in points:
        runs = [r for r in raw if r["rate"] == p["rate"]]
        seconds = sum(r["duration_s"] for r in runs)
        assert p["runs"] == 2
        assert p["completed_rps"] == pytest.approx(sum(len(r["ttft_ms"]) for r in runs) / seconds)
        assert p["throughput_tok_s"] == pytest.approx(
            sum(sum(r["output_len"]) for r in runs) / seconds)
        assert p["throughput_tok_s_lo"] <= p["throughput_tok_s"] <= p["throughput_tok_s_hi"]
        assert p["completed_rps_lo"] <= p["completed_rps"] <= p["completed_rps_hi"]
        row = f"{sig(p['throughput_tok_s'])} [{sig(p['throughput_tok_s_lo'])}–"
        assert row in page.curve.table_html
    pooled, _judged = page.judged()[0]
    assert page.estimates(pooled)["P50 TTFT"].n == 12  # both runs' requests
    checks = page.checks.object  # each rate's goodput with its interval, and its runs
    assert ">runs</th>" in checks and checks.count('<td class="num">2</td></tr>') == 2
    good = page.run_estimates(8)["goodput_rps"]
    assert f"{sig(good.value)} [{sig(good.lo)}–{sig(good.hi)}]" in checks
    rows = json.loads(page.download.texts()[1])["rows"]
    assert rows[0]["throughput_tok_s_hi"] == points[0]["throughput_tok_s_hi"]
    assert rows[0]["runs"] == 2 and rows[0]["requests"] == 12
    pareto = page.pareto.points()
    assert pareto[0]["total_lo"] == points[0]["throughput_tok_s_lo"]


def test_percentiles_carry_their_counts_and_intervals():
    """8 requests a rate: a P50 TTFT or TPOT is bounded (its interval in brackets, around the
    value); a P99 TTFT, TPOT or E2E is not (marked, and the note says a P99 needs 100)."""
    page, service = lesson(SMALL)
    point = page.points_seen[0]
    est = page.estimates(point)
    p50, p99 = est["P50 TTFT"], est["P99 TTFT"]
    assert p50.n == 8 and p50.bounded and p50.lo <= p50.value <= p50.hi
    assert p99.n == 8 and not p99.bounded and not est["P99 E2E"].bounded
    tpot = est["P50 TPOT"]  # per request: one-token answers have none
    assert tpot.n == sum(1 for t in point.tpot_ms if t is not None) and tpot.bounded
    assert tpot.lo <= tpot.value <= tpot.hi and not est["P99 TPOT"].bounded
    table = page.checks.object
    assert f"{sig(p50.value)} [{sig(p50.lo)}–{sig(p50.hi)}]" in table
    assert f"{sig(p99.value)} †" in table
    assert f"{sig(tpot.value)} [{sig(tpot.lo)}–{sig(tpot.hi)}]" in table
    assert "a P99 needs at least 100 samples" in table and "warm-up" in table
    assert page.estimates(point) is est  # computed once, kept while the point is shown


def test_new_targets_are_judged_without_a_new_run():
    page, service = lesson(SMALL)
    page.param.update(ttft_limit_ms=1e7, tpot_limit_ms=1e7)
    assert all(p["goodput_rps"] == p["completed_rps"] for p in page.curve.points())
    page.tpot_limit_ms = 1e-6  # every request's TPOT now fails (each writes 16 tokens or more)
    assert all(p["goodput_rps"] == 0 for p in page.curve.points())
    page.param.update(tpot_limit_ms=1e7, e2e_limit_s=1e-6)  # an optional E2E limit counts too
    assert all(p["goodput_rps"] == 0 for p in page.curve.points())
    assert len(service.submitted) == 1


def test_cost_per_million_tokens_and_a_bad_price():
    page, service = lesson(SMALL)
    points = service.result("rate_sweep")["points"]
    best = max(sum(p["output_len"]) / p["duration_s"] for p in points)
    cost = cost_per_million_tokens(1.0, best)
    assert f"(1 / 3600) × (1,000,000 / {sig(best)}) = **${cost:,.2f} per million tokens**" \
        in page.cost.object
    page.price_per_hour = -2
    assert page.input_error.visible and "negative" in page.input_error.object
    assert "per million" not in page.cost.object
    page.price_per_hour = 3.6
    assert not page.input_error.visible
    assert f"${cost_per_million_tokens(3.6, best):,.2f} per million" in page.cost.object
    page.ttft_limit_ms = 0
    assert "must be more than 0" in page.input_error.object


def test_batch_use_turns_targets_off_and_raises_the_batch():
    page, service = lesson(SMALL)
    page.use = "batch"
    assert page.max_batch == 32 and not page._target_widgets.visible
    assert service.submitted[-1].params["max_batch"] == 32
    for p in page.curve.points():
        assert p["goodput_rps"] == p["completed_rps"]
    assert "No latency limits" in page.checks.object
    assert "overnight batch" in page.uses_table.object
    page.use = "interactive"
    assert page.max_batch == 8 and page.ttft_limit_ms == 200 and page.tpot_limit_ms == 100
    assert "interactive chat" in page.uses_table.object


def test_a_sweep_too_long_for_a_page_is_refused_with_a_message():
    page, service = lesson({"max_rate": [b"0.5"], "points": [b"4"], "requests": [b"64"]})
    assert service.submitted == []
    assert "would take about" in page.runner.status.error._alert.object


def test_the_url_sets_batch_use():
    page, _ = lesson({"use": [b"batch"], **SMALL}, answered=False)
    assert page.use == "batch" and page.max_batch == 32
    assert SLOGoodputLesson.warm_jobs()[1][1]["max_batch"] == 32


def test_the_download_is_the_chart_with_its_percentiles_and_record():
    import json

    from widgets.data_download import read_csv

    page, service = lesson(SMALL)
    csv_file, json_file = page.download.texts()
    data = json.loads(json_file)
    drawn = page.curve.points()
    assert [r["rate"] for r in data["rows"]] == [p["rate"] for p in drawn] == [2, 4, 8]
    for row, point in zip(data["rows"], drawn, strict=True):
        assert {k: row[k] for k in point} == point  # what the chart draws, number for number
        assert row["requests"] == 8 and row["p99_ttft_n"] == 8 and not row["p99_ttft_bounded"]
        assert row["p50_ttft_ci_lo"] <= row["p50_ttft_ms"] <= row["p50_ttft_ci_hi"]
    head = data["header"]
    assert head["job"] == "rate_sweep" and head["params"]["rates"] == [2, 4, 8]
    assert head["slo_limits_ms"] == {"ttft_ms": 200, "tpot_ms": 100} and head["preset"] == "tiny"
    assert head["measured"].startswith("fresh, measured") and head["device"]
    csv_head, csv_rows = read_csv(csv_file)
    assert json.loads(csv_head["params"]) == head["params"]
    assert [float(r["throughput_tok_s"]) for r in csv_rows] == \
        [p["throughput_tok_s"] for p in drawn]


def test_the_frontier_chart_has_a_point_per_rate():
    page, service = lesson(SMALL)
    drawn = page.pareto.points()
    assert [p["setting"] for p in drawn] == [2, 4, 8]
    for d, (point, judged) in zip(drawn, page.judged(), strict=True):
        assert d["total"] == judged.throughput_tok_s
        tpots = sorted(t for t in point.tpot_ms if t is not None)
        assert d["n"] == len(tpots)
        assert 1000 / tpots[-1] <= d["per_user"] <= 1000 / tpots[0]
    assert any(d["frontier"] for d in drawn)
    assert "req/s" in page.pareto.table_html


def test_the_capacity_search_states_its_verdict_and_offers_every_run():
    import json

    page, service = lesson(SMALL)
    service.hold.add("capacity_search")
    page.param.update(cap_ttft_ms=600_000.0, cap_tok_s=0.0, max_users=2)
    page.search_capacity()
    [job] = [j for j in service.submitted if j.kind == "capacity_search"]
    assert job.params["max_users"] == 2 and job.params["repeats"] == 3
    assert job.params["per_doubling"] == 4
    assert "Searching" in page.verdict.object
    job.params.update(prompt_len=[8, 16], output_len=[4, 8])  # the page's own lengths, shorter
    service.release()
    assert page.capacity.users == 2
    assert "holds at least 2 users at P95 TTFT <= 600000 ms" in page.verdict.object
    assert page.cap_table.object.count("<tr>") == 1 + 2  # header, 1 and 2 users
    data = json.loads(page.cap_download.texts()[1])
    # far from both targets, each load is settled by one run (a disturbed one is run again)
    assert [(r["users"], r["run"]) for r in data["rows"]] == [(1, 1), (2, 1)]
    assert data["header"]["verdict"] == page.capacity.verdict
    for load, row in zip(page.capacity.loads, data["rows"], strict=True):
        assert row["load_ttft_p95_ms"] == load.ttft_p95_ms == row["ttft_p95_ms"]  # one run
        assert row["load_requests"] == row["requests"] == 2 * load.users
        assert capacity_ttft(load) in page.cap_table.object  # the table's figure, † and all
        assert capacity_ttft(load).endswith(UNBOUNDED)  # 2 or 4 requests cannot bound a P95


def test_the_prediction_the_question_on_your_sweep_and_the_box_on_gpus():
    page, service = lesson(SMALL)
    points = sorted(service.result("rate_sweep")["points"], key=lambda p: p["rate"])
    verdict = page.prediction_box.verdict
    assert verdict.startswith("Measured:") and f"at {sig(8.0)} requests/s" in verdict
    top = points[-1]
    good = good_requests(top)
    asked = page.checkpoint.questions[-1].question
    assert asked.prompt.startswith(f"At {sig(8.0)} requests/s in your sweep")
    assert asked.answer.text == f"{100 * good / len(top['ttft_ms']):.0f}%"
    # the box on GPUs follows the TPOT limit typed above
    assert "largest batch within TPOT 100 ms" in page.gpu_box.text
    page.tpot_limit_ms = 20
    assert "largest batch within TPOT 20 ms" in page.gpu_box.text


def test_the_teachers_endpoint_is_swept_over_http_and_labelled(endpoint_set):
    page, service = lesson({"points": [b"2"], "requests": [b"4"], "max_rate": [b"40"],
                            "runs": [b"1"], "source": [b"endpoint"]})
    [job] = service.submitted
    assert job.kind == "endpoint_rate_sweep" and job.params["rates"] == [20, 40]
    assert job.params["url"] == endpoint_set.url and "max_batch" not in job.params
    assert not page._batch_slider.visible
    assert [p["rate"] for p in page.curve.points()] == [20, 40]
    assert all(p["completed"] == 4 and p["failed"] == 0 for p in job.result["points"])
    assert f"tiny at {endpoint_set.host}" in page.measured_at.object
    assert "Best goodput" in page.goodput_summary.object
    assert page.by_use == {}  # the endpoint's batch size is its own: not a setting of ours
    import json

    head = json.loads(page.download.texts()[1])["header"]
    assert head["job"] == "endpoint_rate_sweep" and head["preset"] == "tiny"
    assert head["params"]["url"] == endpoint_set.url
