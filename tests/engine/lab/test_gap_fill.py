"""A running load test lends its idle gaps (nothing to do until its next arrival) to waiting
points, with the real worker and the tiny engine: the points are answered while it runs,
without pausing it, and it still serves every request as it would have."""

from __future__ import annotations

import time

import pytest
from service_helpers import (
    KV,
    LOAD,
    QUICK,
    Recorder,
    finished,
    service_on_own_cache,
    stand_in_service,
)


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    # never paused: only a lent gap can let a point through
    with service_on_own_cache(tmp_path_factory.mktemp("llm-speed-cache"),
                              preempt_after_s=1e9) as svc:
        yield svc


def answered(service, session: str) -> None:
    """The reader has a number (no newcomer: their run is not cut short at its first figure)."""
    assert finished(service.submit("sweep_point", {**QUICK, "seed": 30}, session_id=session,
                                   use_cache=False)).state == "done"


def serving_load(service, rec: Recorder, requests: int, seed: int):
    """A load test of a reader with a number already, started: 3 requests a second with a few
    tokens each, so the tiny engine idles most of the time."""
    answered(service, "teacher")
    load = service.submit("load_test", {**LOAD, "rate": 3.0, "requests": requests,
                                        "seed": seed}, rec, session_id="teacher",
                          use_cache=False)
    rec.wait_for(load, "progress")
    return load


def test_points_run_in_a_load_tests_idle_gaps(service):
    rec = Recorder()
    load = serving_load(service, rec, 12, 31)
    time.sleep(0.5)  # it is serving now
    done = service.status()["jobs_done"]
    points = [service.submit("sweep_point", {**QUICK, "batch_size": b, "seed": 31}, rec,
                             session_id=f"student{b}", use_cache=False) for b in (1, 2)]
    for point in points:
        assert finished(point).state == "done"
    assert finished(load).state == "done" and len(load.result["requests"]) == 12
    results = [e.job_id for e in rec.events if e.type == "result"]
    for point in points:  # answered while the load test ran, not after it
        assert results.index(point.id) < results.index(load.id)
    status = service.status()
    assert status["gap_fills"] >= 2 and status["preemptions"] == 0
    assert status["jobs_done"] == done + 3  # a point measured in a gap counts as measured
    assert load.paused == load.preempted == 0
    assert "cancelled" not in rec.types(load)
    # what the load test measured: every request admitted as it arrived (the points ran in its
    # gaps; its clock stopped for whatever ran past one)
    waits = [r["admitted_s"] - r["arrival_s"] for r in load.result["requests"]]
    assert max(waits) < 0.25, waits
    assert not any(point.paused or point.preempted for point in points)


def test_a_point_in_a_gap_can_be_cancelled_and_the_run_goes_on(service):
    rec = Recorder()
    load = serving_load(service, rec, 9, 32)
    long_point = {"preset": "tiny", "kv_budget_mib": KV, "prompt_len": 16, "new_tokens": 600,
                  "batch_size": 2, "seed": 32}
    point = service.submit("sweep_point", long_point, rec, session_id="student",
                           use_cache=False)
    rec.wait_for(point, "started")
    assert load.state == "running"  # it started in one of the load test's gaps
    assert service.cancel(point)
    assert finished(point).state == "cancelled"
    assert finished(load).state == "done" and len(load.result["requests"]) == 9


def test_a_gap_gets_one_point_at_a_time_and_never_a_quiet_wait(tmp_path):
    """The dispatcher's answer to a gap (no worker: what it sends is recorded). A re-measure
    would ask the worker to wait for quiet cores first (up to quiet_wait_s), holding the run
    whose gap it is: in a gap it is measured at once."""
    with stand_in_service(tmp_path) as (svc, d, w, sent):
        run = svc.submit("load_test", LOAD, session_id="teacher")
        d.pump()  # it runs
        assert d.running.jobs == [run] and sent[-1][:2] == ("run", run.id)
        point = svc.submit("sweep_point", QUICK, session_id="student")
        point.remeasures = 1  # a disturbed result of it is measured again
        d.pump()
        assert w.fill_id.value == run.id  # a point waits: the run's gaps are lent
        d.handle(w, ("gap", run.id, 0.05))
        assert sent[-1] == ("run", point.id, "sweep_point", point.params, {})
        assert w.fill_id.value == 0 and d.filling.jobs == [point]
        other = svc.submit("sweep_point", {**QUICK, "batch_size": 2}, session_id="student2")
        d.pump()
        assert w.fill_id.value == 0  # one at a time
        d.handle(w, ("gap", run.id, 0.05))
        assert sent[-1] == ("nofill", run.id) and other.state == "queued"
