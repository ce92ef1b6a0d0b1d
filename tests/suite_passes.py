"""The suite's two passes and the check that no test falls between them (`python -m tests`).

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

# (name, pytest arguments): the tests that need no quiet machine two at a time, then the rest
# one at a time (tests/conftest.py: SERIAL marks them).
PASSES = (
    ("parallel", ["-q", "-n", "2", "-m", "not serial"]),
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
