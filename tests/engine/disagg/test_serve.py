"""A disaggregated run as `run --disaggregate` gives it: live or replayed by the cores there are,
the replay labelled as computed, and bad settings refused with one line."""

from __future__ import annotations

import pytest

from engine.cli.main import main
from engine.config import EngineConfig
from engine.disagg.serve import REPLAY_LABEL, choose_mode, profile_points, run_disaggregated
from engine.errors import ConfigError
from engine.scheduler import SchedulerConfig
from engine.serve.workload import Request


def test_the_mode_follows_the_cores():
    assert choose_mode("auto", (0,)) == "replay"
    assert choose_mode("auto", (0, 1)) == "live"
    assert choose_mode("replay", (0, 1, 2, 3)) == "replay"
    with pytest.raises(ConfigError, match="two cores"):
        choose_mode("live", (3,))


def test_profile_points_span_the_workload():
    reqs = [Request(i, [1] * n, out) for i, (n, out) in enumerate([(10, 4), (50, 8), (30, 6)])]
    prompts, batches, context = profile_points(reqs, 6)
    assert prompts == [10, 20, 30, 40, 50]
    assert batches == [1, 2, 3]  # three requests: the decode worker never holds more
    assert profile_points(reqs * 3, 6)[1] == [1, 2, 4, 6]
    assert context == 30 + 3


def test_a_replayed_run_is_labelled_computed_and_has_every_requests_handover(engine):
    reqs = [Request(i, [1 + i] * n, out, arrival_s=0.01 * i)
            for i, (n, out) in enumerate([(8, 3), (20, 4), (12, 2)])]
    config = EngineConfig(preset="tiny", device="cpu")
    result = run_disaggregated(config, reqs, SchedulerConfig(policy="continuous", max_batch=2),
                               "replay", slo_ttft_ms=1e6, slo_tpot_ms=1e6, engine=engine,
                               rounds=1, cores=(0,))
    out = result.to_json()
    info = out["disaggregation"]
    assert info["mode"] == "replay" and info["label"] == REPLAY_LABEL
    assert info["label"].startswith("computed from measured step costs (replay)")
    assert len(info["handover_ms"]) == 3 and all(h > 0 for h in info["handover_ms"])
    assert set(info["measured"]["costs"]) == {"prefill", "decode", "export", "adopt"}
    assert [len(r["token_s"]) for r in out["requests"]] == [3, 4, 2]
    assert out["metrics"]["ttft_ms"]["max"] > 0
    assert result.metrics.requests_meeting_slo == 3


@pytest.mark.parametrize("flags, needle", [
    (["--policy", "static"], "--policy continuous"),
    (["--policy", "continuous", "--workload", "fixed", "--concurrency", "1"], "closed"),
    (["--policy", "continuous", "--prefix-cache", "on"], "--prefix-cache"),
])
def test_bad_disaggregated_settings_exit_2_with_one_line(flags, needle, capsys):
    assert main(["run", "--requests", "2", "--disaggregate", *flags]) == 2
    out = capsys.readouterr()
    lines = out.err.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], out.err
    assert out.out == ""
