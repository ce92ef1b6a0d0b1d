"""The engine service with its real worker process and the real tiny engine: order of arrival,
the measurement cache (memory and disk), cancellation, errors, a killed worker, many threads,
pauses; and the dispatcher applying the policy's decisions, against a stand-in for the worker's
pipes. The rules themselves are tables in test_policy.py.

Nothing here depends on how loaded the machine is: the cache's paths use a kind whose result
has no timing to disturb (kv_allocation) or a planted entry, a disturbed result is asserted as
such, and a race the test needs is run again until it happens, or the test fails."""

from __future__ import annotations

import json
import os
import signal
import threading
import time

import pytest
from cache_entries import KINDS_OF_DAMAGE, entry, malformed, sweep_result
from service_helpers import (
    KV,
    LOAD,
    LONG,
    QUICK,
    TIMEOUT,
    Recorder,
    finished,
    paused_stack,
    stand_in_service,
    wait_ready,
    wait_until,
)

from engine.config import PRESETS
from engine.lab import registry
from engine.lab.cache import CacheStore, disturbed
from engine.lab.client import RECENTLY_ENDED, EngineService
from engine.lab.events import Job
from engine.lab.runs import Run, RunState
from engine.lab.settings import DEFAULT

BLOCKS = "kv_allocation"  # a cacheable kind that times nothing: its result is never disturbed


@pytest.fixture(scope="module")
def cache_path(tmp_path_factory, server):
    # The session's served engine first: started here, after $LLM_SPEED_CACHE names this
    # module's fresh cache, it would build the kernels and time the plans the tests' cache holds.
    path = tmp_path_factory.mktemp("llm-speed-cache")
    old = os.environ.get("LLM_SPEED_CACHE")
    os.environ["LLM_SPEED_CACHE"] = str(path)  # the worker inherits it (hardware limits)
    yield path
    if old is None:
        os.environ.pop("LLM_SPEED_CACHE", None)
    else:
        os.environ["LLM_SPEED_CACHE"] = old


@pytest.fixture(scope="module")
def service(cache_path):
    # a disturbed result is final at once: each job measured once, whatever the machine's load
    # (the re-measure path: test_isolation.py)
    svc = EngineService(cache_path=cache_path / "results", remeasures=0)
    svc.lend_gaps = False  # these see pauses; a run's gaps lent to points: test_gap_fill.py
    assert wait_ready(svc, TIMEOUT), svc.status()
    yield svc
    svc.shutdown()


def plant(cache_path, svc: EngineService, kind: str, params: dict, result: dict) -> None:
    """Store a quiet result for a job's exact key in the service's disk cache."""
    status = svc.status()
    key = CacheStore.key(status["device"], status["engine_version"], kind,
                         registry.normalize(kind, params))
    path = CacheStore(cache_path / "results")._path(key)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(entry(key, result)))


def test_jobs_run_one_at_a_time_in_order_of_arrival(service):
    rec = Recorder()
    jobs = [service.submit("sweep_point", {**QUICK, "batch_size": b}, rec, use_cache=False)
            for b in (1, 2, 3)]
    for job in jobs:
        finished(job)
    assert [j.state for j in jobs] == ["done"] * 3
    assert [j.result["batch_size"] for j in jobs] == [1, 2, 3]
    with rec._lock:
        order = [(e.job_id, e.type) for e in rec.events if e.type in ("started", "result")]
    # one at a time: each start is followed by that job's result before anything else starts
    assert order[0::2] == [(job_id, "started") for job_id, _ in order[1::2]]
    assert [t for _, t in order[1::2]] == ["result"] * (len(order) // 2)
    # in order of arrival (a disturbed result is measured again behind what waits then)
    starts = [job_id for job_id, t in order if t == "started"]
    assert sorted(set(starts), key=starts.index) == [j.id for j in jobs]
    progress = [e for e in rec.of(jobs[0]) if e.type == "progress"]
    assert progress and progress[-1].data["done"] == progress[-1].data["total"] == 7
    assert not any(j.cached for j in jobs)




def test_a_repeated_job_comes_from_the_cache(service, cache_path):
    rec = Recorder()
    params = {"blocks": 3, "block_size": 8}
    first = finished(service.submit(BLOCKS, params, rec))
    hits = service.status()["cache_hits"]
    again = finished(service.submit(BLOCKS, dict(reversed(params.items())), rec))
    assert first.state == again.state == "done"
    assert not first.cached and again.cached
    assert again.result == first.result
    assert again.device == first.device and again.device.startswith("cpu")
    assert again.measured_at == first.measured_at
    result = rec.wait_for(again, "result")
    assert result.cached and result.device == first.device
    assert "started" not in rec.types(again)  # answered without running
    assert service.status()["cache_hits"] == hits + 1
    assert list((cache_path / "results").glob(f"{BLOCKS}-*.json"))


def test_a_timed_result_is_cached_only_when_quiet(service):
    """With remeasures=0 a result is final whatever its check says; the cache keeps it only if
    the check says quiet (both ways asserted: the machine's load decides which one runs)."""
    params = {**QUICK, "batch_size": 2, "seed": 11}
    first = finished(service.submit("sweep_point", params))
    assert first.state == "done" and first.remeasures == 0 and not first.cached
    quiet = not disturbed(first.result)
    assert (service.cached("sweep_point", params) is not None) is quiet
    again = finished(service.submit("sweep_point", params))
    assert again.cached is quiet and (again.result == first.result) is quiet


def test_the_cache_can_be_asked_without_running_anything(service):
    params = {"blocks": 5, "block_size": 8}
    assert service.cached(BLOCKS, params) is None
    first = finished(service.submit(BLOCKS, params))
    record = service.cached(BLOCKS, dict(reversed(params.items())))
    assert record is not None and record["result"] == first.result
    assert record["measured_at"] == first.measured_at
    assert service.cached("sweep_point", {"batch_size": -1}) is None  # bad parameters
    assert service.cached("no_such_kind", {}) is None


def test_defaults_share_a_cache_entry_with_explicit_values(service):
    explicit = finished(service.submit(BLOCKS, {"blocks": 4, "block_size": 16,
                                                "device": "auto"}))
    implicit = finished(service.submit(BLOCKS, {}))
    assert not explicit.cached and implicit.cached and implicit.result == explicit.result


def test_the_disk_cache_outlives_the_service(service, cache_path):
    params = {"blocks": 6, "block_size": 8}
    first = finished(service.submit(BLOCKS, params))
    fresh = EngineService(cache_path=cache_path / "results")
    try:
        again = finished(fresh.submit(BLOCKS, params))
    finally:
        fresh.shutdown()
    assert not first.cached and again.cached
    assert again.result == first.result and again.measured_at == first.measured_at


def test_use_cache_false_measures_again(service):
    params = {**QUICK, "batch_size": 1, "seed": 3}
    first = finished(service.submit("sweep_point", params))
    again = finished(service.submit("sweep_point", params, use_cache=False))
    assert not again.cached and again.measured_at >= first.measured_at


def test_cancel_a_queued_and_a_running_job(service):
    rec = Recorder()
    running = service.submit("sweep_point", LONG, rec, use_cache=False)
    queued = service.submit("sweep_point", {**QUICK, "batch_size": 4}, rec, use_cache=False)
    after = service.submit("sweep_point", {**QUICK, "batch_size": 5}, rec, use_cache=False)
    rec.wait_for(running, "progress")
    assert service.cancel(queued)
    assert service.cancel(running)
    assert finished(running).state == "cancelled"
    assert finished(queued).state == "cancelled"
    assert finished(after).state == "done"
    assert rec.types(queued) == ["queued", "cancelled"]
    assert rec.types(running)[-1] == "cancelled" and "result" not in rec.types(running)
    assert not service.cancel(after)  # already finished


def test_a_closed_session_cancels_its_jobs(service):
    rec = Recorder()
    mine = service.submit("sweep_point", LONG, rec, session_id="closed", use_cache=False)
    mine_queued = service.submit("sweep_point", QUICK, rec, session_id="closed",
                                 use_cache=False)
    other = service.submit("sweep_point", QUICK, rec, session_id="open", use_cache=False)
    rec.wait_for(mine, "progress")
    assert service.cancel_session("closed") == 2
    assert finished(mine).state == "cancelled"
    assert finished(mine_queued).state == "cancelled"
    assert finished(other).state == "done"


@pytest.mark.parametrize("kind, params, words", [
    ("sweep_point", {"batch_size": 0}, "batch_size must be between 1 and 4096"),
    ("sweep_point", {"batch_size": "eight"}, "batch_size must be a whole number"),
    ("sweep_point", {**QUICK, "prompt_len": 2000, "new_tokens": 100}, "context of 2048"),
    ("sweep_point", {"bacth_size": 4}, "unknown parameter 'bacth_size'"),
    ("sweep_point", {"preset": "huge"}, "preset must be one of"),
    ("generate", {"prompt": "   "}, "the prompt is empty"),
    ("no_such_job", {}, "unknown job kind 'no_such_job'"),
])
def test_bad_params_give_a_one_line_error_and_the_service_goes_on(service, kind, params, words):
    rec = Recorder()
    job = finished(service.submit(kind, params, rec))
    event = rec.wait_for(job, "error")
    assert job.state == "error" and words in event.data["message"]
    assert "\n" not in event.data["message"] and "Traceback" not in event.data["message"]
    assert finished(service.submit("sweep_point", QUICK)).state == "done"


def test_a_killed_worker_is_restarted_and_the_next_job_runs(service):
    rec = Recorder()
    doomed = service.submit("sweep_point", LONG, rec, use_cache=False)
    waiting = service.submit("sweep_point", {**QUICK, "batch_size": 6}, rec, use_cache=False)
    rec.wait_for(doomed, "progress")
    restarts, pid = service.status()["restarts"], service.status()["worker_pid"]
    os.kill(pid, signal.SIGKILL)
    error = rec.wait_for(doomed, "error")
    assert "worker stopped unexpectedly" in error.data["message"]
    assert "\n" not in error.data["message"]
    assert finished(waiting).state == "done"
    status = service.status()
    assert status["restarts"] == restarts + 1 and status["worker_pid"] != pid
    assert status["worker_alive"]




def test_many_threads_submitting_at_once_all_get_their_results(service):
    rec = Recorder()
    jobs, lock = [], threading.Lock()
    barrier = threading.Barrier(8)

    def client(i: int) -> None:
        barrier.wait()
        job = service.submit(BLOCKS, {"blocks": 1 + i % 4, "block_size": 4}, rec,
                             session_id=f"s{i}")
        with lock:
            jobs.append((i, job))

    threads = [threading.Thread(target=client, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(jobs) == 8
    for i, job in jobs:
        finished(job)
        assert job.state == "done" and job.result["blocks"] == 1 + i % 4
        assert rec.types(job)[-1] == "result"
    # each number of blocks measured once: the others came from the cache or rode on its run
    assert sum(j.cached or j.readers > 1 for _, j in jobs) >= 4


def test_generate_streams_a_token_event_per_token(service):
    rec = Recorder()
    job = finished(service.submit("generate", {"prompt": "The cache", "max_new_tokens": 12,
                                               "kv_budget_mib": KV}, rec))
    assert job.state == "done" and not job.cached
    tokens = [e.data for e in rec.of(job) if e.type == "token"]
    assert len(tokens) == len(job.result["tokens"]) >= 1
    assert "".join(t["text"] for t in tokens) == "".join(t["text"] for t in job.result["tokens"])
    assert all(a["t_s"] <= b["t_s"] for a, b in zip(tokens, tokens[1:], strict=False))
    assert job.result["weights"] == "trained"


def test_info_job_describes_the_machine(service):
    job = finished(service.submit("info"))
    info = job.result
    assert {"device", "threads", "presets", "memory_bandwidth_gbs", "matmul_gflops"} <= set(info)
    assert info["memory_bandwidth_gbs"] > 0 and info["matmul_gflops"] > 0
    assert [p["name"] for p in info["presets"]] == list(PRESETS)  # smallest first


def test_a_job_sent_to_an_endpoint_says_where_it_measured(service, server):
    """Its result event names the endpoint's model and host, not the worker's own device, so
    a page's provenance line does not credit this machine with a remote server's numbers."""
    rec = Recorder()
    job = service.submit("endpoint_concurrency", {
        "concurrency": 2, "prompt_len": 8, "new_tokens": 4, "url": server["url"],
        "model": server["model"]}, rec)
    event = rec.wait_for(finished(job), "result")
    assert event.device == f"tiny at {server['url'].split('/')[2]}, over HTTP"
    assert not event.cached and job.result["completed"] == 2


def test_status_says_what_the_worker_is_doing(service):
    rec = Recorder()
    job = service.submit("sweep_point", LONG, rec, use_cache=False)
    rec.wait_for(job, "progress")
    status = service.status()
    assert status["ready"] and status["running"]["kind"] == "sweep_point"
    assert status["running"]["params"]["batch_size"] == 4
    assert status["running"]["progress"]["total"] == 1499
    service.cancel(job)
    finished(job)
    assert service.status()["running"] is None


def test_readers_asking_the_same_question_share_one_run(service):
    rec = Recorder()
    blocker = service.submit("sweep_point", LONG, rec, use_cache=False)
    rec.wait_for(blocker, "started")
    done = service.status()["jobs_done"]
    params = {**QUICK, "batch_size": 3, "seed": 21}
    jobs = [service.submit("sweep_point", params, rec, session_id=f"r{i}") for i in range(3)]
    assert service.status()["queue"] == [{"id": jobs[0].id, "kind": "sweep_point",
                                          "size": "point"}]  # one run waits, for three
    service.cancel(blocker)
    for job in jobs:
        finished(job)
    assert [j.state for j in jobs] == ["done"] * 3
    assert [j.readers for j in jobs] == [3, 3, 3] and not any(j.cached for j in jobs)
    assert jobs[0].result == jobs[1].result == jobs[2].result
    # measured once (and again for each disturbed result: a busy machine)
    assert [j.remeasures for j in jobs] == [jobs[0].remeasures] * 3
    assert service.status()["jobs_done"] == done + 1 + jobs[0].remeasures
    assert all(rec.types(j)[-1] == "result" and "progress" in rec.types(j) for j in jobs)


def test_a_job_asked_while_the_same_one_runs_joins_it(service):
    rec = Recorder()
    params = {**LONG, "new_tokens": 300, "seed": 22}
    done = service.status()["jobs_done"]
    first = service.submit("sweep_point", params, rec, session_id="first")
    rec.wait_for(first, "progress")
    second = service.submit("sweep_point", params, rec, session_id="second")
    assert service.status()["running"]["readers"] == 2 and service.status()["queued"] == 0
    assert rec.wait_for(second, "started")
    assert service.cancel(first)  # the first reader leaves: the run goes on for the second
    assert finished(second).state == "done" and not second.cached
    assert finished(first).state == "cancelled"
    # measured once (and again for each disturbed result: a busy machine)
    assert service.status()["jobs_done"] == done + 1 + second.remeasures
    assert rec.types(second).count("started") == 1 + second.remeasures
    assert "progress" in rec.types(second)


def test_a_readers_newest_request_of_a_demo_replaces_their_queued_ones(service):
    rec = Recorder()
    blocker = service.submit("sweep_point", LONG, rec, use_cache=False)
    rec.wait_for(blocker, "started")
    old = [service.submit("sweep_point", {**QUICK, "batch_size": b, "seed": 23}, rec,
                          session_id="slider", demo="knob", replace=i == 0)
           for i, b in enumerate((2, 4))]
    neighbour = service.submit("sweep_point", {**QUICK, "seed": 23}, rec, session_id="other",
                               demo="knob", replace=True)
    newest = service.submit("sweep_point", {**QUICK, "batch_size": 8, "seed": 23}, rec,
                            session_id="slider", demo="knob", replace=True)
    for job in old:
        assert rec.wait_for(job, "cancelled").data == {"replaced_by": newest.id}
    service.cancel(blocker)
    assert finished(newest).state == "done" and finished(neighbour).state == "done"




@pytest.mark.parametrize("what", KINDS_OF_DAMAGE)
def test_a_malformed_cache_entry_is_measured_again(service, cache_path, what):
    """A cache file planted for a job's exact key, broken in each way, is discarded and the job
    measured again; the fresh result replaces it if it is quiet, and nothing does if not."""
    status = service.status()
    seed = 1000 + KINDS_OF_DAMAGE.index(what)
    params = registry.normalize("sweep_point", {**QUICK, "batch_size": 2, "seed": seed})
    key = CacheStore.key(status["device"], status["engine_version"], "sweep_point", params)
    path = CacheStore(cache_path / "results")._path(key)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(malformed(key)[what])
    rec = Recorder()
    job = finished(service.submit("sweep_point", params, rec))
    assert job.state == "done" and not job.cached, rec.types(job)
    assert "started" in rec.types(job)  # measured, not read
    assert job.record.batch_size == 2 and job.record.prompt_len == QUICK["prompt_len"]
    quiet = not disturbed(job.result)
    assert path.exists() is quiet  # the damaged file is gone; a quiet result's file is new
    again = finished(service.submit("sweep_point", params))
    assert again.cached is quiet and (again.result == job.result) is quiet


def test_a_waiting_job_is_shown_a_nearby_cached_result_first(service, cache_path):
    rec = Recorder()
    settings = {**QUICK, "new_tokens": 9, "seed": 24}  # no other test measures these
    near = {**sweep_result(), "batch_size": 4, "new_tokens": 9}
    plant(cache_path, service, "sweep_point", {**settings, "batch_size": 4}, near)
    blocker = service.submit("sweep_point", LONG, rec, use_cache=False)
    rec.wait_for(blocker, "started")
    job = service.submit("sweep_point", {**settings, "batch_size": 6}, rec, nearby=True)
    shown = rec.wait_for(job, "nearby")
    assert shown.cached and shown.near["batch_size"] == 4 and shown.data == near
    assert shown.result.batch_size == 4
    service.cancel(blocker)
    assert finished(job).state == "done" and job.result["batch_size"] == 6
    assert rec.types(job)[:2] == ["queued", "nearby"] and rec.types(job)[-1] == "result"


BUILD_TRIES = 3  # the build must be stopped before it ends: a new engine each try


def test_a_model_build_is_paused_for_a_point_and_goes_on_where_it_stopped(service):
    """A model's build is stopped between two steps for a point and goes on where it stopped.
    The tiny model's build is short: if it ends before the service's stop arrives, the test
    builds another engine (up to BUILD_TRIES), and fails if none was ever stopped."""
    finished(service.submit("sweep_point", {**QUICK, "seed": 26}, use_cache=False))  # built
    service.preempt_after_s, service.turn_s = 0.0, 0.0  # pause a build at its first step
    try:
        for attempt in range(BUILD_TRIES):
            rec = Recorder()
            blocker = service.submit("sweep_point", LONG, rec, session_id="blocker",
                                     use_cache=False)
            rec.wait_for(blocker, "started")
            unbuilt = {**QUICK, "random_weights": True, "kv_budget_mib": KV + 1 + attempt,
                       "seed": 26}
            build = service.submit("sweep_point", unbuilt, rec,
                                   session_id=f"roofline{attempt}", use_cache=False)
            point = service.submit("sweep_point", {**QUICK, "seed": 27 + attempt}, rec,
                                   session_id=f"student{attempt}", use_cache=False)
            service.cancel(blocker)
            assert finished(point).state == "done" and finished(build).state == "done"
            if [e for e in rec.of(build) if e.type == "queued" and e.data.get("resumes")]:
                break
        else:
            raise AssertionError(f"none of {BUILD_TRIES} builds was stopped for a point")
    finally:
        service.preempt_after_s, service.turn_s = DEFAULT.preempt_after_s, DEFAULT.turn_s
    assert build.paused >= 1 and build.preempted == 0, rec.of(build)
    said = [e.data["message"] for e in rec.of(build) if e.type == "progress"
            and "building" in e.data]
    assert said[0] == "loading the tiny model..." and said[-1].endswith("done; measuring")
    assert sum("weights made" in m for m in said) == 1  # it went on; it never started over
    results = [e.job_id for e in rec.events if e.type == "result"]
    assert results.index(point.id) < results.index(build.id)  # the point did not wait for it


def test_a_load_test_is_paused_for_a_point_and_goes_on_where_it_stopped(service):
    rec = Recorder()
    load = service.submit("load_test", {**LOAD, "requests": 30, "seed": 25}, rec,
                          session_id="teacher", use_cache=False)
    wait_first_figure(rec, load)  # (asked before it, a point cuts it short)
    point = service.submit("sweep_point", {**QUICK, "seed": 25}, rec, session_id="student",
                           use_cache=False)
    assert finished(point).state == "done"
    assert finished(load).state == "done" and len(load.result["requests"]) == 30
    paused = [e for e in rec.of(load) if e.type == "queued" and e.data.get("resumes")]
    assert paused and load.paused == len(paused) and load.preempted == 0
    types = rec.types(load)
    assert types[-1] == "result" and "cancelled" not in types
    results = [e.job_id for e in rec.events if e.type == "result"]
    assert results.index(point.id) < results.index(load.id)  # the point did not wait for it
    first_run = types.index("result")  # a disturbed result is measured again from the start
    answered = [e.data["done"] for e in rec.of(load)[:first_run] if e.type == "progress"]
    assert answered == sorted(answered) and answered[-1] == 30  # it went on; never restarted
    assert service.status()["preemptions"] >= 1


def test_a_paused_load_test_stops_within_a_step_when_its_reader_cancels(service):
    rec = Recorder()
    load = service.submit("load_test", {**LOAD, "requests": 600, "seed": 28}, rec,
                          session_id="teacher", use_cache=False)  # 100 s of arrivals
    wait_first_figure(rec, load)  # (asked before it, a point cuts it short)
    blocker = service.submit("sweep_point", LONG, rec, session_id="student", use_cache=False)
    rec.wait_for(blocker, "started")  # inside the load test's pause
    assert load.paused == 1 and service.status()["paused"]["id"] == load.id
    assert service.cancel(load)
    service.cancel(blocker)
    assert finished(load, 30).state == "cancelled" and "result" not in rec.types(load)
    assert finished(blocker).state == "cancelled"
    status = service.status()
    assert status["paused"] is None and (status["running"] or {}).get("id") != load.id


def test_a_schedule_run_inside_a_paused_load_test_is_paused_in_turn_for_a_point(service):
    """Runs served in real time give way to shorter jobs, inside each other's pauses too: a load
    test is paused for a newcomer's schedule run, and that run in turn for another newcomer's
    point; each goes on where it stopped, the innermost first."""
    rec = Recorder()
    service.preempt_after_s, service.turn_s = 0.5, 0.5
    try:
        load = service.submit("load_test", {**LOAD, "requests": 30, "seed": 31}, rec,
                              session_id="teacher", use_cache=False)  # 5 s of arrivals
        wait_first_figure(rec, load)  # (asked before it, a point cuts it short)
        lanes = service.submit("serve_run", {
            "preset": "tiny", "kv_budget_mib": KV, "rate": 6.0, "requests": 30,
            "prompt_len": [8, 16], "output_len": [4, 8], "stream_tokens": False, "seed": 31},
            rec, session_id="lanes", use_cache=False)
        wait_until(lambda: so_far(rec, lanes), what=str(rec.types(lanes)))
        assert service.status()["paused_runs"] == 1
        paused_before = lanes.paused  # its engine's build may have been paused: not this
        point = service.submit("sweep_point", {**QUICK, "seed": 31}, rec, session_id="student",
                               use_cache=False)
        assert finished(point).state == "done"
        assert finished(lanes).state == "done" and finished(load).state == "done"
    finally:
        service.preempt_after_s, service.turn_s = DEFAULT.preempt_after_s, DEFAULT.turn_s
    assert load.paused >= 1 and lanes.paused > paused_before, (rec.types(load), rec.types(lanes))
    answered = so_far(rec, lanes)  # it went on where it stopped: never served again from 0
    assert answered == sorted(answered) and answered[0] == 1 and answered[-1] == 30
    results = [e.job_id for e in rec.events if e.type == "result"]
    assert results.index(point.id) < results.index(lanes.id) < results.index(load.id)
    assert len(lanes.result["requests"]) == 30 and len(load.result["requests"]) == 30
    assert service.status()["paused_runs"] == 0




def wait_first_figure(rec: Recorder, job) -> None:
    """Until a serving run has put its first partial figure on its reader's page."""
    wait_until(lambda: so_far(rec, job), what=str(rec.types(job)))


def so_far(rec: Recorder, job) -> list[int]:
    """The requests answered so far, as a serving run's progress events said them up to its
    first result (a disturbed result is measured again from the start)."""
    events = rec.of(job)
    first = next((i for i, e in enumerate(events) if e.type == "result"), len(events))
    return [e.data["so_far"]["answered"] for e in events[:first]
            if e.type == "progress" and "so_far" in e.data]



def test_a_newcomer_keeps_their_rank_past_a_lookup_aside_and_loses_it_to_a_nearby_number(
        service, cache_path):
    """Rule 0 (engine.lab.job_queue) as the service applies it: a reader whose only answer is a
    lookup aside (the GPU box's machine description, from the cache at once) has nothing on
    screen, so their first load test still goes before a schedule run of a reader who has a
    number; a reader shown a nearby cached result has a number, and waits by the size rule."""
    rec = Recorder()
    described = finished(service.submit("info", {}))
    # the machine's description and the nearby answer, cached quiet whatever the load was (a
    # disturbed result is never cached, nor offered)
    plant(cache_path, service, "info", {}, {**described.result, "check": None})
    near = finished(service.submit("load_test", {**LOAD, "requests": 4, "seed": 40}))
    plant(cache_path, service, "load_test", {**LOAD, "requests": 4, "seed": 40},
          {**near.result, "check": None})
    finished(service.submit("sweep_point", {**QUICK, "seed": 40}, session_id="has-a-number",
                            use_cache=False))
    blocker = service.submit("sweep_point", LONG, rec, session_id="blocker", use_cache=False)
    rec.wait_for(blocker, "started")
    first = shown = run = None
    try:
        info = finished(service.submit("info", {}, rec, session_id="aside", aside=True))
        assert info.cached
        first = service.submit("load_test", {**LOAD, "requests": 6, "seed": 41}, rec,
                               session_id="aside", use_cache=False)
        shown = service.submit("load_test", {**LOAD, "requests": 5, "seed": 40}, rec,
                               session_id="nearby", nearby=True)
        rec.wait_for(shown, "nearby")
        run = service.submit("serve_run", {"preset": "tiny", "kv_budget_mib": KV,
                                           "requests": 2, "seed": 41}, rec,
                             session_id="has-a-number", use_cache=False)
        assert service.position(first) < service.position(run) < service.position(shown)
    finally:
        for job in (blocker, first, shown, run):
            if job is not None:
                service.cancel(job)


def test_a_runs_first_partial_figure_ends_its_readers_newcomer_rank(service):
    """While a newcomer's first load test runs, their next job would be their first queued one;
    once the run has shown a partial figure (so_far) the reader has a number, and that next
    job waits by the size rule, behind another reader's point."""
    rec = Recorder()
    finished(service.submit("sweep_point", {**QUICK, "seed": 42}, session_id="has-a-number",
                            use_cache=False))
    service.preempt_after_s = 1000.0  # nothing pauses the load test while the test looks
    try:
        load = service.submit("load_test", {**LOAD, "requests": 30, "seed": 42}, rec,
                              session_id="new", use_cache=False)  # 5 s of arrivals
        wait_until(lambda: so_far(rec, load), what=str(rec.types(load)))
        later = service.submit("load_test", {**LOAD, "requests": 7, "seed": 42}, rec,
                               session_id="new", use_cache=False)
        point = service.submit("sweep_point", {**QUICK, "seed": 43}, rec,
                               session_id="has-a-number", use_cache=False)
        assert load.state == "running" and service.position(point) < service.position(later)
    finally:
        service.preempt_after_s = DEFAULT.preempt_after_s
        for job in (load, later, point):
            service.cancel(job)




def _load(i: int, now: float) -> Job:
    return Job(1000 + i, "load_test", {}, session_id=f"load{i}", size="load", pausable=True,
               figures=True, use_cache=False, submitted_at=now - 60)


def _figure(run_id: int, answered: int = 1) -> tuple:
    """The worker's message for a serving run's progress with its partial figure."""
    return ("event", run_id, "progress", {"done": answered, "total": 30, "message": "",
                                          "so_far": {"answered": answered, "e2e_p50_ms": 90.0}})


def _running(d, w, job: Job) -> Run:
    """Queue a job on the stand-in and let the dispatcher start it."""
    d.queue.add(job)
    d.pump()
    assert d.running is not None and d.running.jobs == [job]
    return d.running


def test_the_dispatcher_pauses_runs_a_point_inside_the_pause_and_resumes(tmp_path):
    """PAUSE, the worker's "paused", START inside the pause, RESUME, as the dispatcher applies
    them: the signals it sets, the messages it sends, the events its readers get."""
    now = time.time()
    with stand_in_service(tmp_path, lend_gaps=False) as (svc, d, w, sent):
        run = _running(d, w, _load(0, now))
        run.started_at = now - 5  # past its turn
        point = Job(2, "sweep_point", {}, session_id="knob", size="point", use_cache=False,
                    submitted_at=now - 1.2)
        d.queue.answered("knob")
        d.queue.add(point)
        d.pump()
        assert run.state is RunState.PAUSING and w.pause_id.value == run.id
        d.handle(w, ("paused", run.id))
        assert d.paused == [run] and run.state is RunState.PAUSED and d.running is None
        queued = [e for j, e in d.outbox.pending() if j is run.lead and e.type == "queued"]
        assert queued[-1].data["resumes"] and run.lead.paused == 1
        d.pump()  # the point starts inside the pause
        assert d.running.jobs == [point] and sent[-1][:2] == ("run", point.id)
        d.handle(w, ("result", point.id, sweep_result(), "2026-01-01T00:00:00+0000"))
        assert point.state == "done" and d.running is None
        d.pump()  # nothing smaller waits: the load test goes on
        assert d.running is run and run.state is RunState.RUNNING and not d.paused
        assert sent[-1] == ("resume", run.id) and w.pause_id.value == 0
        assert svc.status()["preemptions"] == 1


def test_a_run_cancelled_while_it_is_being_paused_goes_on_at_once_to_stop(tmp_path):
    now = time.time()
    with stand_in_service(tmp_path, lend_gaps=False) as (svc, d, w, sent):
        run = _running(d, w, _load(0, now))
        run.started_at = now - 5
        d.queue.answered("knob")
        d.queue.add(Job(2, "sweep_point", {}, session_id="knob", size="point",
                        use_cache=False, submitted_at=now - 1.2))
        d.pump()
        assert run.state is RunState.PAUSING
        assert svc.cancel(run.lead) and w.cancel_id.value == run.id
        d.handle(w, ("paused", run.id))  # it was paused before it saw the cancel
        assert run.state is RunState.CANCELLING and d.paused == [run]
        d.pump()
        assert d.running is run and sent[-1] == ("resume", run.id)
        assert w.cancel_id.value == run.id  # it goes on only to stop


@pytest.mark.parametrize("depth", [DEFAULT.max_paused, DEFAULT.max_paused + 1])
def test_a_newcomers_run_started_with_the_pause_stack_full_stops_at_its_first_figure(
        tmp_path, depth):
    """With the pause stack full, a newcomer's run that shows a partial figure soon starts
    figure_only: never paused, stopped at its first figure whoever waits, queued again whole."""
    now = time.time()
    with stand_in_service(tmp_path) as (svc, d, w, sent):
        paused_stack(d, depth, now, [_load(i, now) for i in range(depth)])
        newcomer = Job(1, "serve_run", {}, session_id="new", size="run", pausable=True,
                       figures=True, use_cache=False, submitted_at=now - 2)
        d.queue.answered("knob")
        run = _running(d, w, newcomer)
        assert run.figure_only and sent[-1][:3] == ("run", newcomer.id, "serve_run")
        assert len(d.paused) == depth  # the innermost did not go on
        point = Job(2, "sweep_point", {}, session_id="knob", size="point", use_cache=False,
                    submitted_at=now - 5)  # long overdue
        d.queue.add(point)
        run.started_at = now - 5  # past its turn
        d.pump()
        assert run.state is RunState.RUNNING and w.pause_id.value == 0  # never paused
        d.queue.remove(point)  # nobody waits any more, and yet at its first figure
        d.handle(w, _figure(run.id))
        assert run.state is RunState.CUTTING_SHORT and w.cancel_id.value == run.id
        d.handle(w, ("event", run.id, "cancelled", {}))
        assert d.running is None and list(d.queue) == [newcomer]  # queued again, whole
        assert newcomer.preempted == 1 and not d.queue.newcomer("new")  # a number on screen


def test_a_newcomers_run_cut_short_is_queued_again_whole_behind_the_point(tmp_path):
    now = time.time()
    with stand_in_service(tmp_path) as (svc, d, w, sent):
        run = _running(d, w, _load(0, now))
        point = Job(2, "sweep_point", {}, session_id="knob", size="point",
                    submitted_at=now - 0.1)
        d.queue.answered("knob")
        d.queue.add(point)
        d.handle(w, _figure(run.id))
        assert not d.queue.newcomer(run.lead.session_id)  # a number on the page
        assert run.state is RunState.CUTTING_SHORT and w.cancel_id.value == run.id
        d.handle(w, _figure(run.id, 2))  # the job has not stopped yet
        assert svc.cut_short == 1
        d.handle(w, ("event", run.id, "cancelled", {}))  # stopped at its next check
        assert d.running is None and run.lead in d.queue
        assert run.lead.state == "queued" and run.lead.preempted == 1
        queued = [e for j, e in d.outbox.pending() if j is run.lead and e.type == "queued"]
        assert queued[-1].data["preempted"] and not queued[-1].data["resumes"]
        assert d.queue.take(now) == [point]  # the point first, then the full run
        assert d.queue.take(now) == [run.lead]


def test_a_run_is_not_cut_short_for_a_newcomer_who_joined_it_after_its_first_figure(tmp_path):
    """A newcomer who asked the same question while a run goes on joins it and gets their first
    figure from its next progress event: the run, well under way, goes on."""
    now = time.time()
    with stand_in_service(tmp_path) as (svc, d, w, sent):
        run = _running(d, w, _load(0, now))
        d.handle(w, _figure(run.id))  # its own reader's first figure: nobody waits
        assert run.state is RunState.RUNNING and run.figured
        joined = Job(3, "load_test", {}, session_id="late", size="load")
        run.jobs.append(joined)
        d.queue.answered("knob")
        d.queue.add(Job(2, "sweep_point", {}, session_id="knob", size="point"))
        d.handle(w, _figure(run.id, 12))
        assert not d.queue.newcomer("late")  # a number on their page
        assert run.state is RunState.RUNNING and w.cancel_id.value == 0 and svc.cut_short == 0


def test_a_build_in_a_lent_gap_is_stopped_and_queued_again(tmp_path):
    """A gap is no place for a model's build: a point lent a gap that starts building is told
    to stop its build (the worker keeps it), and queued again to go on where it stopped."""
    now = time.time()
    with stand_in_service(tmp_path) as (svc, d, w, sent):
        run = _running(d, w, _load(0, now))
        d.queue.answered("knob")
        point = Job(2, "sweep_point", {}, session_id="knob", size="point", use_cache=False,
                    submitted_at=now - 0.1)
        d.queue.add(point)
        d.pump()
        assert w.fill_id.value == run.id  # a point waits: the run's gaps are lent
        d.handle(w, ("gap", run.id, 0.05))
        fill = d.filling
        assert fill.jobs == [point] and sent[-1] == ("run", point.id, "sweep_point", {}, {})
        d.handle(w, ("event", point.id, "progress", {"done": 0, "total": 0, "building": True}))
        assert fill.state is RunState.STOPPING_BUILD and w.cancel_id.value == -point.id
        d.handle(w, ("event", point.id, "cancelled", {}))
        assert d.filling is None and list(d.queue) == [point] and point.paused == 1
        assert d.running is run



def test_a_newcomers_load_test_cut_short_runs_again_in_full_after_the_next_newcomer(service):
    """With the real worker: of two newcomers' load tests, the first shows its first figure, is
    cut short for the second (whose reader has nothing on screen yet), and then runs again from
    its first request to its last."""
    rec = Recorder()
    blocker = service.submit("sweep_point", LONG, rec, session_id="cut-blocker", use_cache=False)
    rec.wait_for(blocker, "started")
    service.turn_s = 1000.0  # no pauses: what happens is the cut at the first figure
    try:
        first = service.submit("load_test", {**LOAD, "requests": 30, "seed": 50}, rec,
                               session_id="cut-first", use_cache=False)  # 5 s of arrivals
        second = service.submit("load_test", {**LOAD, "requests": 12, "seed": 51}, rec,
                                session_id="cut-second", use_cache=False)
        service.cancel(blocker)  # the newcomers' load tests go, in order of arrival
        assert finished(first).state == "done" and finished(second).state == "done"
    finally:
        service.turn_s = DEFAULT.turn_s
    assert first.preempted == 1 and second.preempted == 0, (rec.types(first), rec.types(second))
    assert service.status()["cut_short"] >= 1
    events = rec.of(first)
    events = events[:next(i for i, e in enumerate(events) if e.type == "result")]
    cut = next(i for i, e in enumerate(events) if e.type == "queued" and e.data.get("preempted"))
    assert any(e.type == "progress" and "so_far" in e.data for e in events[:cut])
    assert not events[cut].data["resumes"]
    results = [e.job_id for e in rec.events if e.type == "result"]
    assert results.index(second.id) < results.index(first.id)
    again = [e.data["so_far"]["answered"] for e in events[cut:]
             if e.type == "progress" and "so_far" in e.data]
    assert again[0] == 1 and again[-1] == 30  # started over, and ran to the end
    assert len(first.result["requests"]) == 30


def test_a_job_asked_while_a_stopping_run_has_lost_its_last_reader_is_queued(tmp_path):
    """A newcomer's run being cut short at its first figure whose reader then moves a slider:
    the page cancels the run's only job and asks a new one at once. The run, still stopping in
    the worker, has no job left: the new one is queued (and nothing reads the lead of an empty
    run)."""
    with stand_in_service(tmp_path) as (svc, d, w, sent):
        first = Job(1, "serve_run", {"policy": "fcfs"}, None, "reader-1")
        run = Run(first.id, [first], state=RunState.CUTTING_SHORT)
        d.running = run
        first.state = "running"
        assert svc.cancel(first)
        assert run.jobs == [] and run.cancelling and run.lead is first
        job = svc.submit("serve_run", dict(first.params), session_id="reader-1")
        assert job.state == "queued" and job not in run.jobs
        assert svc.status()["running"]["kind"] == "serve_run"  # it reads the stopping run too


def test_the_status_names_how_each_recent_job_ended(tmp_path):
    """/engine-status's recently_ended: a job's own outcome, whatever else ends meanwhile (a
    count of jobs measured also counts another reader's job ending)."""
    svc = EngineService(cache_path=tmp_path / "results", start=False)
    first = svc.submit("sweep_point", QUICK, session_id="a")
    second = svc.submit("sweep_point", {**QUICK, "batch_size": 2}, session_id="b")
    assert svc.status()["recently_ended"] == []
    assert svc.cancel(second)
    assert svc.status()["recently_ended"] == [
        {"id": second.id, "kind": "sweep_point", "state": "cancelled", "cached": False}]
    for _ in range(RECENTLY_ENDED):  # bounded: the oldest go first
        svc.cancel(svc.submit("sweep_point", QUICK, session_id="c"))
    ended = svc.status()["recently_ended"]
    assert len(ended) == RECENTLY_ENDED and second.id not in {j["id"] for j in ended}
    assert first.state == "queued"
