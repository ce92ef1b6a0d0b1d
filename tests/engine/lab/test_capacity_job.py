"""The capacity_search job on the real tiny engine: closed-loop loads, each tried again
while undecided, searched by doubling then bisection on a grid; its verdict agrees with the loads it measured (not how fast it is)."""

from __future__ import annotations

from test_measure_jobs import SMALL_KV, run_job

from engine.lab import registry


def test_the_search_finds_the_last_load_that_met_the_targets():
    params = {**SMALL_KV, "max_users": 8, "repeats": 2, "requests_per_user": 1,
              "prompt_len": [8, 16], "output_len": [4, 8], "ttft_p95_ms": 60_000,
              "per_user_tok_s": 0.0}  # targets every load meets: the search climbs to the top
    result, events = run_job("capacity_search", params)
    assert result["users"] == 8 and result["first_failing_users"] is None
    assert [load["users"] for load in result["loads"]] == [1, 2, 4, 8]
    assert result["grid"] == [1, 2, 3, 4, 5, 6, 7, 8]
    # far from both targets: each load settled by its first run (a disturbed run is run again)
    assert all(len(load["trials"]) == 1 and load["met"] for load in result["loads"])
    assert result["trials_run"] == 4 + result["disturbed_reruns"]
    for load in result["loads"]:  # pooled: one request a user, its P95 within its interval
        assert load["requests"] == load["users"] == load["trials"][0]["requests"]
        assert load["ttft_ci_lo"] <= load["ttft_p95_ms"] <= load["ttft_ci_hi"]
        assert load["ttft_bounded"] is False  # 8 requests or fewer cannot bound a P95
    assert "at least 8 users" in result["verdict"]
    steps = [d for t, d in events if t == "step"]
    assert [d["users"] for d in steps] == [1, 2, 4, 8]
    spread = result["spread"]  # every trial's engine steps, and the search's disturbance check
    assert spread["what"] == "engine step" and spread["count"] >= 4 * 4  # >= 4 tokens a trial
    assert spread["p10"] <= spread["p90"] and result["check"] is not None


def test_an_unmeetable_target_stops_at_one_user_with_a_cause():
    params = {**SMALL_KV, "max_users": 8, "repeats": 1, "requests_per_user": 1,
              "prompt_len": [8, 16], "output_len": [4, 8], "ttft_p95_ms": 60_000,
              "per_user_tok_s": 1e5}  # 100,000 tokens/s each: no load meets it
    result, _ = run_job("capacity_search", params)
    assert result["users"] == 0 and result["first_failing_users"] == 1
    assert "compute" in result["cause"] and "holds no load" in result["verdict"]
    assert registry.normalize("capacity_search", {})["repeats"] == 3
