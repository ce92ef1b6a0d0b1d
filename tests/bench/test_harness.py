"""bench/harness.py: targets judged against their limit, the run's exit status, the JSON result as
stdout's last line, and one line per run appended to the bench's log with machine, date, commit."""

from __future__ import annotations

import json

import pytest

from bench import harness


@pytest.fixture
def results(tmp_path, monkeypatch):
    monkeypatch.setattr(harness, "RESULTS", tmp_path)
    return tmp_path


def test_targets_met_and_missed_set_the_exit_status(results, capsys):
    run = harness.Run("demo", {"rounds": 2})
    run.round({"round": 1, "ms": 3.0})
    run.round({"round": 2, "ms": 5.0}, "round 2: 5 ms")
    assert run.target("speed-up", 1.5, at_least=1.3)
    assert not run.target("worst ms", 5.0, at_most=4.0)
    assert run.finish({"figure": 4.0}) == 1
    out = capsys.readouterr().out.splitlines()
    assert "round 2: 5 ms" in out and any(line.startswith("round 1: {") for line in out)
    assert "[met] speed-up: 1.5 (at least 1.3)" in out
    assert "[MISSED] worst ms: 5.0 (at most 4.0)" in out
    result = json.loads(out[-1])
    assert result["bench"] == "demo" and result["figure"] == 4.0
    assert [r["ms"] for r in result["rounds"]] == [3.0, 5.0]
    assert len(result["load_average_before"]) == len(result["load_average_after"]) == 3
    assert json.loads((results / "demo.json").read_text()) == result


def test_each_run_appends_one_line_with_machine_date_and_commit(results, capsys):
    for value in (1.0, 2.0):
        run = harness.Run("demo", {"rounds": 1})
        run.target("ratio", value, at_least=1.5)
        run.finish({"ratio": value}, log={"ratio": value})
    lines = [json.loads(line) for line in (results / "demo.jsonl").read_text().splitlines()]
    assert [line["result"] for line in lines] == [{"ratio": 1.0}, {"ratio": 2.0}]
    assert [line["targets"][0]["met"] for line in lines] == [False, True]
    first = lines[0]
    assert first["bench"] == "demo" and first["args"] == {"rounds": 1}
    assert first["date"].endswith("+00:00") and first["machine"]["cpus"] >= 1
    assert first["commit"] is None or len(first["commit"].split("+")[0]) == 12


def test_no_targets_is_success_and_a_target_needs_one_limit(results, capsys):
    run = harness.Run("demo")
    with pytest.raises(ValueError):
        run.target("both", 1.0, at_least=0.0, at_most=2.0)
    assert run.finish({}) == 0
