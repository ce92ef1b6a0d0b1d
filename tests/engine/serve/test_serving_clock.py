"""The serving loop's clock through an idle gap lent to other work, against the wall clock: the
run's clock stops only for what the other work ran past the gap, so every request is still
admitted as it arrives. These bound real durations, so they run alone (the rest of the loop's
behaviour, a pause included: test_serving.py)."""

from __future__ import annotations

import time

import pytest
from run_checks import tiny_engine_with_budget

from engine.scheduler import SchedulerConfig
from engine.serve.loop import run
from engine.serve.workload import Request

OVERRUN = 0.4  # s: how far past each lent gap the other work runs


@pytest.fixture(scope="module")
def engine():
    return tiny_engine_with_budget(16 * 2**20)


@pytest.mark.parametrize("past", [OVERRUN, None])
def test_an_idle_gap_lent_to_other_work_is_not_the_runs_time(engine, past):
    """The lab's worker runs another reader's point in a load test's idle gap (cancelled.fill):
    the loop lends the gap instead of sleeping, and its clock stops only for what went past
    it, so every request is still admitted when it arrives (past: the fill overruns by
    OVERRUN each time) and a fill within the gap costs the run nothing (None: half the gap)."""
    prompt = engine.tokenizer.encode("Explain what a dictionary is.")
    # One request alone first: on a loaded machine its steps are slow, and arrivals 0.3 s apart
    # left no idle gap to lend. Spaced from what serving one took now, every arrival is
    # followed by an idle gap, and the bounds below allow for a step in progress.
    alone = run(engine, [Request(0, prompt, 3, 0.0)], SchedulerConfig("continuous", 4))
    busy_s = alone.requests[0].finish_s
    step_s = max(s.end_s - s.start_s for s in alone.steps)
    every = max(0.3, 4 * busy_s)
    last = 3 * every  # the last arrival
    slack = max(0.5, 2 * busy_s)
    reqs = [Request(i, prompt, 3, every * i) for i in range(4)]  # idle between arrivals
    lent = []

    def cancelled() -> bool:
        return False

    def fill(ahead_s: float) -> float:
        used = ahead_s / 2 if past is None else ahead_s + past
        time.sleep(used)
        lent.append((ahead_s, used))
        return used

    cancelled.fill = fill
    start = time.perf_counter()
    result = run(engine, reqs, SchedulerConfig("continuous", 4), cancelled=cancelled)
    wall = time.perf_counter() - start
    assert lent and all(ahead >= 0.02 for ahead, _ in lent)  # gaps were lent, none tiny
    assert all(r.finished for r in result.requests)
    for r in result.requests:  # admitted on arrival: no request waited through a fill
        assert r.admitted_s - r.arrival_s < max(0.1, 2 * step_s), (r.id, r.arrival_s,
                                                                    r.admitted_s)
    overrun = sum(max(0.0, used - ahead) for ahead, used in lent)
    assert wall >= overrun + last  # the run's arrivals, plus what went past the gaps
    assert result.requests[-1].finish_s < last + slack  # its own clock never saw the overrun
    if past is None:
        assert overrun == 0 and wall < last + slack
