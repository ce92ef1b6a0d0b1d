"""The suite's passes and the check that no test falls between them (`python -m tests`).

Each pytest process that collects (the plain one, or each pytest-xdist worker) writes, where
$LLM_SPEED_TEST_COUNTS names a folder, one JSON file: how many tests it collected and how many
it kept after `-m`. The passes must have collected the same tests, and the tests they kept must
add up to them: a test that neither pass runs (a marker expression that drops it, a worker that
collected something else) is a failure, not a quieter green run.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

COUNTS_ENV = "LLM_SPEED_TEST_COUNTS"

# The tests that must run alone (marked `serial`): they bound a wait or a duration on the wall
# clock, or make the machine busy or quiet on purpose, so a second test beside them on a 2-core
# machine would change what they see. A test on a real engine worker or server that asserts what
# was run and answered (the engine service's queue with remeasures=0, the HTTP server, the
# lessons on in-process runs) needs no quiet machine and is not listed.
# `-n 2 -m "not serial"` (pytest-xdist) runs the rest two at a time; `-m serial` runs these.
SERIAL = (
    "tests/ui/test_plain_serve.py",  # a served app stops within seconds of Ctrl-C: a bound
    "tests/ui/test_lessons_9_12.py::test_prefix_cache",  # cached prefix: a 1.5x shorter TTFT
    "tests/engine/serve/",  # a lent gap's clock, phases' coverage, think times, a cap's waits
    "tests/engine/cli/",  # the session's one `tune` (served apps' caches copy it), plans timed
    "tests/engine/lab/test_gap_fill.py",  # a load test's waits under 0.25 s while points fill it
    "tests/engine/lab/test_isolation.py",  # busy loops on the engine's core; a job alone is quiet
    "tests/engine/lab/test_probe.py",  # a second call within the probe's freshness window
    "tests/lessons/test_capacity_lesson.py",  # its plan: measured TTFTs against a 200 ms target
    "tests/lessons/test_session_frames.py",  # frames counted against the time events took
)

# Files in SERIAL's folders that need no quiet machine: arithmetic on planted timelines and
# seeded workloads, output compared token by token, the command line's output and refusals (its
# measured limits are checked on either outcome), HTTP shapes and counters. A new file in those
# folders runs alone until it is listed here.
NOT_SERIAL = (
    "tests/engine/serve/test_metrics.py",
    "tests/engine/serve/test_workload.py",
    "tests/engine/serve/test_online.py",
    "tests/engine/serve/test_speculative_run.py",
    "tests/engine/serve/test_serving.py",  # token equality, events, a pause, refusals
    "tests/engine/serve/test_api_server.py",  # greedy equality over HTTP, usage, error objects
    "tests/engine/serve/test_bench_client.py",  # the workload sent; causality on one offset
    "tests/engine/serve/test_report.py",  # SLO figures recomputed from the requests
    "tests/engine/serve/test_replay.py",  # the trace's times, lengths and shared prefixes
    "tests/engine/serve/test_lengths.py",  # drawn lengths sent as drawn
    "tests/engine/serve/test_endpoint_job.py",  # every request answered, progress, a cancel
    "tests/engine/serve/test_serve_classes.py",  # classes, caps and quotas refused over HTTP
    "tests/engine/serve/test_class_run_engine.py",  # knobs applied at a step index
    "tests/engine/serve/test_class_fair.py",  # a queue's order, no engine
    "tests/engine/serve/test_class_lanes.py",  # admission order by step index
    "tests/engine/serve/test_saturation.py",  # rates 267x apart: kept up with, and flooded
    "tests/engine/serve/test_perfetto.py",  # the trace's spans are the run's own records
    "tests/engine/serve/test_prometheus.py",  # counters move by what was sent
    "tests/engine/cli/test_cli.py",
    "tests/engine/cli/test_experts_cli.py",
    "tests/engine/cli/test_invariance_cli.py",
)


def is_serial(nodeid: str) -> bool:
    return nodeid.startswith(SERIAL) and not nodeid.startswith(NOT_SERIAL)


# (name, pytest arguments): the tests that need no quiet machine two at a time; the browser
# tests (marked `browser`: tests/ui/conftest.py) two at a time in a pass of their own, each
# pytest-xdist worker with its own served app, engine worker and Chromium, its measurements
# counted as quiet (tests/ui/ui_helpers.served_env); then the rest one at a time (SERIAL above;
# tests/conftest.py marks them). Each file's tests go to one worker (loadfile), so a module's
# fixtures (an engine, a page, a stand-in service) are made once.
PASSES = (
    ("parallel", ["-q", "-n", "2", "--dist", "loadfile", "-m", "not serial and not browser"]),
    ("browser", ["-q", "-n", "2", "--dist", "loadfile", "-m", "browser and not serial"]),
    ("serial", ["-q", "-m", "serial"]),
)


def record(collected: int, selected: int) -> None:
    """Write this process's counts where $LLM_SPEED_TEST_COUNTS says (nothing where unset)."""
    folder = os.environ.get(COUNTS_ENV)
    if not folder:
        return
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    Path(folder, f"{worker}.json").write_text(
        json.dumps({"worker": worker, "collected": collected, "selected": selected}))


def lost_tests(counts: dict[str, list[dict]]) -> str | None:
    """What is wrong with the passes' counts ({pass: [one record per collecting process]}), in
    a sentence, or None where the passes kept every collected test exactly once."""
    totals = set()
    kept = 0
    for name, records in counts.items():
        if not records:
            return f"the {name} pass wrote no counts (it did not collect)"
        if len({(r["collected"], r["selected"]) for r in records}) > 1:
            seen = ", ".join(f"{r['worker']}: {r['selected']} of {r['collected']}"
                             for r in records)
            return f"the {name} pass's workers collected different tests ({seen})"
        totals.add(records[0]["collected"])
        kept += records[0]["selected"]
    if len(totals) > 1:
        return f"the passes collected different numbers of tests ({sorted(totals)})"
    total = totals.pop() if totals else 0
    if kept != total:
        return (f"the passes ran {kept} of {total} collected tests: "
                f"{abs(total - kept)} {'never ran' if kept < total else 'ran twice'}")
    return None
