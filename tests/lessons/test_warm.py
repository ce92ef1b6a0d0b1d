"""The cache warmer lists the jobs the pages show by default, and refuses unknown lessons."""

from __future__ import annotations

import pytest

from lessons import warm
from lessons.warm import jobs_to_warm, main


def test_warm_covers_the_about_page_and_the_engine_check():
    jobs = jobs_to_warm()
    assert ("about", "info", {}) in jobs
    assert any(where == "engine-check" and kind == "sweep_point" for where, kind, _ in jobs)


def test_warm_refuses_an_unknown_lesson(capsys):
    assert main(["--lesson", "nope"]) == 2
    assert "no lesson called 'nope'" in capsys.readouterr().err


def test_warm_builds_the_kernels_then_times_the_plans_before_any_job(monkeypatch):
    """The machine's set-up (README): kernels, then the plans timed with them, then the jobs."""
    ran = []

    class NoJobs(Exception):
        pass

    def no_service():
        raise NoJobs

    monkeypatch.setattr(warm.subprocess, "run", lambda args, check: ran.append(args[1:]))
    monkeypatch.setattr(warm, "EngineService", no_service)
    with pytest.raises(NoJobs):
        warm.main(["--lesson", "knob"])
    assert ran == [["-m", "engine", "build-kernel"], ["-m", "engine", "tune"]]
