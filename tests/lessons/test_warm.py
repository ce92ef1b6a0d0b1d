"""The cache warmer lists the jobs the pages show by default, and refuses unknown lessons."""

from __future__ import annotations

from lessons.warm import jobs_to_warm, main


def test_warm_covers_the_about_page_and_the_engine_check():
    jobs = jobs_to_warm()
    assert ("about", "info", {}) in jobs
    assert any(where == "engine-check" and kind == "sweep_point" for where, kind, _ in jobs)


def test_warm_refuses_an_unknown_lesson(capsys):
    assert main(["--lesson", "nope"]) == 2
    assert "no lesson called 'nope'" in capsys.readouterr().err
