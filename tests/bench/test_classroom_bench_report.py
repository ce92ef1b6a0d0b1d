"""The class bench's arithmetic (bench/lab/class_report.py, class_server.py): the percentiles and
summaries every figure goes through, the engine's counters at the last answered sample, what ran
most, and the server log's tracebacks counted once per exception. The bench itself runs for
minutes on a quiet machine; these parts run on their own."""

from __future__ import annotations

import subprocess
import sys
from types import SimpleNamespace

import pytest

from bench.lab.class_report import (
    arrival_timeline,
    engine_counts,
    percentile,
    running_by_kind,
    summary,
)
from bench.lab.class_server import ENGINE_COUNTS, exceptions_logged
from bench.web.served_app import ROOT


def test_percentiles_are_linear_between_ranks():
    values = [4.0, 1.0, 3.0, 2.0]  # sorted: 1 2 3 4
    assert percentile(values, 0) == 1.0 and percentile(values, 100) == 4.0
    assert percentile(values, 50) == pytest.approx(2.5)
    assert percentile(values, 95) == pytest.approx(3.85)
    assert percentile([7.0], 95) == 7.0 and percentile([], 50) is None


def test_a_summary_rounds_and_says_none_for_nothing():
    assert summary([0.123456, 0.2, 0.3], 3) == {"n": 3, "p50_s": 0.2, "p95_s": 0.29,
                                                 "max_s": 0.3}
    assert summary([]) == {"n": 0, "p50_s": None, "p95_s": None, "max_s": None}


def test_the_arrival_timeline_leaves_out_steps_not_reached():
    students = [SimpleNamespace(pulled_s=1.0, pull_cpu_s=0.01, ready_s=1.1, skip_s=1.2,
                                first_number_s=3.2),
                SimpleNamespace(pulled_s=2.0, pull_cpu_s=0.02, ready_s=None, skip_s=None,
                                first_number_s=None)]
    timeline = arrival_timeline(students)
    assert timeline["pulled"]["n"] == 2 and timeline["pulled"]["max_s"] == 2.0
    assert timeline["first_number"]["n"] == 1
    assert timeline["skip_to_number"] == summary([2.0])


def test_engine_counts_come_from_the_last_answered_sample():
    answered = {k: i for i, k in enumerate(ENGINE_COUNTS)}
    queue = [{"jobs_done": 1, "gap_fills": 0}, answered, {"jobs_done": None}]
    assert engine_counts(queue) == answered
    assert engine_counts([]) == {k: None for k in ENGINE_COUNTS}


def test_what_ran_most_comes_first():
    queue = [{"running_kind": "point"}, {"running_kind": "sweep"}, {"running_kind": None},
             {"running_kind": "sweep"}]
    assert list(running_by_kind(queue).items()) == [("sweep", 2), ("point", 1)]


def test_a_chained_exception_in_the_log_counts_once(tmp_path):
    log = tmp_path / "server.log"
    assert exceptions_logged(log) is None  # no log: not zero
    chained = ("Traceback (most recent call last):\n  ...\nKeyError: 1\n\nDuring handling of "
               "the above exception, another exception occurred:\n\n"
               "Traceback (most recent call last):\n  ...\nValueError: 2\n")
    log.write_text(chained + "Traceback (most recent call last):\n  ...\nOSError\n")
    assert exceptions_logged(log) == 2


@pytest.mark.parametrize("extra", [[], ["--class-mode"]])
def test_the_class_bench_still_answers_help(extra):
    done = subprocess.run([sys.executable, "bench/lab/classroom.py", *extra, "--help"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "--students" in done.stdout and (extra or "--churn" in done.stdout)
