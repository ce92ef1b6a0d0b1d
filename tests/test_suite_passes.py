"""`python -m tests` runs the suite in three passes; these check what keeps a test from falling
between them: every SERIAL entry names a real path, the counts each pytest process writes are
taken before `-m` drops anything, and a count that does not add up is a failure."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from _pytest.mark.expression import Expression
from suite_passes import COUNTS_ENV, NOT_SERIAL, PASSES, SERIAL, is_serial, lost_tests

ROOT = Path(__file__).resolve().parent.parent


def test_every_serial_entry_names_a_test_file_or_folder():
    for entry in (*SERIAL, *NOT_SERIAL):
        file, _, test = entry.partition("::")  # a file's tests whose names start so
        path = ROOT / file
        assert path.is_dir() if entry.endswith("/") else path.is_file(), entry
        assert not test or f"def {test}" in path.read_text(), entry
    assert all(entry.startswith(SERIAL) for entry in NOT_SERIAL)  # exceptions in its folders


# Each pass's marker expression (`-m`), read as pytest reads it.
PASS_MARKS = {name: args[args.index("-m") + 1] for name, args in PASSES}


def test_every_test_falls_in_exactly_one_pass():
    """Whatever a test is marked (serial, browser, both or neither), one pass's `-m` keeps it:
    the counts check (lost_tests) catches a test lost at run time, this one before."""
    for marks in ({"serial"}, {"browser"}, {"serial", "browser"}, set()):
        taking = [name for name, expr in PASS_MARKS.items()
                  if Expression.compile(expr).evaluate(marks.__contains__)]
        assert len(taking) == 1, (marks, taking)
    assert PASS_MARKS["browser"] == "browser and not serial"


def test_a_new_file_in_a_serial_folder_runs_alone_until_listed():
    assert is_serial("tests/engine/serve/test_new.py::test_x")
    assert not is_serial("tests/engine/serve/test_metrics.py::test_x")
    assert not is_serial("tests/engine/test_sampler.py::test_x")
    # the browser tests run two at a time, but for those that assert a bound
    assert is_serial("tests/ui/test_plain_serve.py::test_x")
    assert is_serial("tests/ui/test_lessons_9_12.py::test_prefix_cache_gives_x[chromium]")
    assert not is_serial("tests/ui/test_lessons_9_12.py::test_speculative_decoding_x[chromium]")


def counts(worker="main", collected=10, selected=4) -> dict:
    return {"worker": worker, "collected": collected, "selected": selected}


def test_passes_that_keep_every_test_once_are_accepted():
    assert lost_tests({"parallel": [counts("gw0", 10, 6), counts("gw1", 10, 6)],
                       "serial": [counts(selected=4)]}) is None


def test_a_test_in_neither_pass_or_in_both_fails_the_run():
    assert lost_tests({"parallel": [counts(selected=5)], "serial": [counts(selected=4)]}) == (
        "the passes ran 9 of 10 collected tests: 1 never ran")
    assert "1 ran twice" in lost_tests({"parallel": [counts(selected=7)],
                                        "serial": [counts(selected=4)]})


def test_passes_that_collected_differently_fail_the_run():
    assert "different numbers" in lost_tests({"parallel": [counts(collected=11, selected=7)],
                                              "serial": [counts(selected=4)]})
    assert "workers collected different tests" in lost_tests(
        {"parallel": [counts("gw0", 10, 6), counts("gw1", 9, 5)], "serial": [counts()]})
    assert "wrote no counts" in lost_tests({"parallel": [], "serial": [counts()]})


def test_a_pytest_process_writes_what_it_collected_before_the_marker_dropped_any(tmp_path):
    """One real collection: test_harness's three tests are not serial, test_probe's one is."""
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
         "-m", "serial", "tests/bench/test_harness.py", "tests/engine/lab/test_probe.py"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
        env={**{k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST")},
             COUNTS_ENV: str(tmp_path)})  # a plain pytest, even from an xdist worker
    assert out.returncode == 0, out.stdout[-2000:]
    written = json.loads((tmp_path / "main.json").read_text())
    assert written == {"worker": "main", "collected": 4, "selected": 1}
