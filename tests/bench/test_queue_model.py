"""bench/lab/queue_model.py: a modeled class on the real queue and policy is played for each way
of asking the knob's context points, its knob readers' releases are answered, and bad arguments
exit 2."""

from __future__ import annotations

import pytest

from bench.lab import queue_model


def test_a_small_class_is_played_for_each_way_of_asking_the_context():
    out = queue_model.main(["--students", "12", "--seeds", "1"])
    assert set(out["by_context"]) == {"foreground", "background", "none"}
    for context, found in out["by_context"].items():
        assert found["release_to_drawn_s"]["n"] > 0, context
        assert sum(found["worker_busy_s"].values()) > 0
    shares = out["by_context"]["none"]["knob_waits_spent_on"]
    assert "another reader's context point" not in shares  # none was asked


def test_bad_arguments_exit_2_with_a_message(capsys):
    with pytest.raises(SystemExit) as exit_:
        queue_model.main(["--seeds", "0"])
    assert exit_.value.code == 2
    assert "--seeds must be at least 1" in capsys.readouterr().err
