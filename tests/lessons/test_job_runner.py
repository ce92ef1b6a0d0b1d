"""The job runner: a group of one or many, replaced as a whole with the late events of the old
group dropped, jobs added to a running group, cancellation that spares what the page keeps, the
live queue position in words, provenance lines, and the start-on-load hook of the page base."""

from __future__ import annotations

import panel as pn
from in_process_service import run_job
from lesson_stubs import DEVICE, WHEN, attach

from engine.lab.events import Job, JobEvent
from engine.lab.results import SweepPointResult
from lessons.base import Page, UrlPage
from lessons.job_runner import JobRunner
from widgets.job_status import provenance, queue_message


def test_queue_messages_say_where_a_job_waits():
    assert queue_message(1) == ("queued behind 1 job from other readers (the engine runs one "
                                "at a time: short measurements first, readers in turn)")
    assert queue_message(2, preempted=True).startswith("paused for 2 jobs of other readers")
    assert queue_message(3, preempted=True, resumes=True) == (
        "paused for 3 jobs of other readers, short measurements first; it goes on where it "
        "stopped after them")
    assert "behind 4 jobs" in queue_message(4) and queue_message(0) == "starting"


def test_provenance_names_preset_weights_and_device():
    event = JobEvent(1, "sweep_point", "result", {}, device=DEVICE)
    point = {**run_job("sweep_point", {"batch_size": 1, "prompt_len": 8, "new_tokens": 4})[1],
             "device": "cpu"}
    assert provenance(SweepPointResult.from_dict(point), event) == \
        f"tiny preset (trained weights) on {DEVICE}"
    small = SweepPointResult.from_dict({**point, "preset": "small", "weights": "random"})
    assert provenance(small) == "small preset (random weights: timing only) on cpu"


def runner_on_a_page():
    page = UrlPage()
    service = attach(page)
    runner = JobRunner(page)
    pn.panel(runner.status).get_root()
    return runner, service


def test_runner_shows_the_live_queue_and_replaces_its_job():
    runner, service = runner_on_a_page()
    seen = []
    first = runner.submit("sweep_point", {"batch_size": 2}, seen.append)
    service.send(first, "queued", {"ahead": 2})
    assert "queued behind 2 jobs" in runner.status.message
    service.queue, service.running = [first], Job(99, "info", {})  # another reader's job
    runner.refresh_queue_position()
    assert "queued behind 1 job " in runner.status.message
    second = runner.submit("sweep_point", {"batch_size": 4}, seen.append)
    assert service.cancelled == [first] and runner.jobs == [second]
    service.send(second, "started")
    assert runner.status.message == "measuring"
    service.finish(second, {"batch_size": 4})
    assert runner.jobs == [] and not runner.busy
    assert [e.type for e in seen] == ["queued", "started", "result"]
    assert "cached" not in runner.status.label_text and DEVICE in runner.status.label_text


def test_the_queue_poll_changes_the_page_only_when_the_count_does():
    """The process's clock asks each waiting page twice a second (widgets.ticker); a page whose
    place in the queue has not moved is not called (30 waiting readers: 60 calls a second that
    each re-set the same line before)."""
    runner, service = runner_on_a_page()
    first = runner.submit("sweep_point", {"batch_size": 2}, lambda e: None)
    service.queue, service.running = [Job(98, "info", {}), first], Job(99, "info", {})
    service.send(first, "queued", {"ahead": 2})
    assert runner._queue_due() is None  # still 2 ahead
    service.queue = [first]
    change = runner._queue_due()
    assert "queued behind 2 jobs" in runner.status.message  # asked, not changed yet
    change()
    assert "queued behind 1 job " in runner.status.message and runner._queue_due() is None
    first.state = "running"  # the service's part
    service.send(first, "started")
    assert runner._queue_due() is None


def test_errors_become_a_message():
    runner, service = runner_on_a_page()
    job = runner.submit("sweep_point", {"batch_size": 2}, lambda e: None)
    service.send(job, "error", {"message": "batch of 2 needs 9 KV blocks"})
    assert "batch of 2 needs 9 KV blocks" in runner.status.error._alert.object


def test_a_new_group_replaces_the_old_and_drops_its_late_events():
    runner, service = runner_on_a_page()
    seen = []
    old = runner.run([("sweep_point", {"batch_size": b}, seen.append) for b in (1, 2)])
    assert runner.status.total == 2 and runner.status.running
    new = runner.run([("sweep_point", {"batch_size": 4}, seen.append)])
    assert service.cancelled == old and runner.jobs == new
    service.finish(old[0], {"batch_size": 1})  # late: the reader has moved on
    assert seen == [] and runner.status.finished == 0 and runner.status.running
    service.finish(new[0], {"batch_size": 4})
    assert [e.job_id for e in seen] == [new[0].id] and not runner.status.running


def test_added_jobs_join_the_running_group_and_cancel_spares_what_is_kept():
    runner, service = runner_on_a_page()
    one = runner.add("sweep_point", {"batch_size": 1}, lambda e: None)
    two = runner.add("sweep_point", {"batch_size": 2}, lambda e: None)
    three = runner.add("sweep_point", {"batch_size": 3}, lambda e: None)
    assert runner.status.total == 3 and runner.jobs == [one, two, three]
    service.send(one, "started")
    one.state = "running"
    assert runner.cancel(keep=lambda job: job.state == "running") == 2
    assert service.cancelled == [two, three] and runner.jobs == [one]
    assert runner.status.total == 1 and runner.status.running
    service.finish(one, {"batch_size": 1})
    assert not runner.status.running and runner.jobs == []
    runner.add("sweep_point", {"batch_size": 4}, lambda e: None)  # after the group: a new one
    assert (runner.status.total, runner.status.finished) == (1, 0)


def test_only_the_groups_first_waiting_job_speaks_for_the_queue():
    runner, service = runner_on_a_page()
    first, second = runner.run([("sweep_point", {"batch_size": b}, lambda e: None)
                                for b in (1, 2)])
    service.send(first, "queued", {"ahead": 3})
    service.send(second, "queued", {"ahead": 4})  # the 4th ahead of it is the group's own
    assert "queued behind 3 jobs" in runner.status.message


class Probe(Page):
    """A page that records when it is started."""

    def __init__(self, **params):
        super().__init__(**params)
        self.starts = 0

    def view(self):
        return pn.Column(self.runner.status)

    def start(self):
        self.starts += 1


def test_a_page_starts_once_when_first_drawn_outside_a_server():
    """(In a served session the base calls start() on load instead: tests/ui open every page.)"""
    page = Probe()
    attach(page)
    assert not page.started and page.starts == 0
    pn.panel(page).get_root()
    pn.panel(page).get_root()
    assert page.started and page.starts == 1


def test_a_re_measured_job_passes_on_its_first_stream_and_only_the_new_result():
    runner, service = runner_on_a_page()
    seen = []
    job = runner.submit("serve_run", {}, seen.append)
    service.send(job, "started")
    service.send(job, "step", {"index": 0})
    service.send(job, "result", {"run": 1}, device=DEVICE, remeasuring=True)
    assert runner.jobs == [job] and runner.status.running  # not over
    service.send(job, "queued", {"ahead": 0, "remeasure": 1})
    service.send(job, "started")
    service.send(job, "step", {"index": 0})  # the new run's stream: not drawn over the first
    service.send(job, "token", {"index": 0})
    service.finish(job, {"run": 2})
    assert [e.type for e in seen] == ["started", "step", "queued", "started", "result"]
    assert [e.data for e in seen if e.type == "result"] == [{"run": 2}]
    assert not runner.busy and not runner.status.running


def test_a_run_cut_short_keeps_its_first_part_and_its_figure_until_the_full_result():
    """engine.lab.client cuts a newcomer's run short at its first figure and queues it again to
    start over: the page keeps what it drew (the new run's stream is not drawn over it), the
    status keeps the partial figure, labelled as stopped, until the full run's own."""
    runner, service = runner_on_a_page()
    seen = []
    job = runner.submit("serve_run", {}, seen.append)
    service.send(job, "started")
    service.send(job, "request", {"kind": "arrived", "request_id": 0, "t_s": 0.0})
    service.send(job, "step", {"index": 0})
    figure = {"answered": 1, "e2e_p50_ms": 143.0}
    service.send(job, "progress", {"done": 1, "total": 30, "so_far": figure})
    service.send(job, "queued", {"ahead": 2, "preempted": True, "resumes": False})
    assert "measured live so far" in runner.status.progress_text
    assert "starts again in full" in runner.status.progress_text
    service.send(job, "started")
    service.send(job, "request", {"kind": "arrived", "request_id": 0, "t_s": 0.0})
    service.send(job, "step", {"index": 0})  # the new run's stream: not drawn over the first
    service.send(job, "progress", {"done": 0, "total": 30,
                                   "so_far": {"answered": 0, "e2e_p50_ms": None}})
    assert "starts again in full" in runner.status.progress_text  # still its only figure
    service.send(job, "progress", {"done": 1, "total": 30, "so_far": figure})
    assert "(the run goes on)" in runner.status.progress_text  # the full run's own
    service.finish(job, {"run": 2})
    assert [e.type for e in seen] == ["started", "request", "step", "progress", "queued",
                                      "started", "progress", "progress", "result"]
    assert not runner.busy and not runner.status.running


def test_a_run_stopped_before_it_drew_anything_draws_its_new_stream():
    """A run stopped before the page drew any of it (its engine's build stopped just as it
    ended) has nothing to keep: its new stream is drawn."""
    runner, service = runner_on_a_page()
    seen = []
    job = runner.submit("serve_run", {}, seen.append)
    service.send(job, "started")
    service.send(job, "queued", {"ahead": 1, "preempted": True, "resumes": False})
    service.send(job, "started")
    service.send(job, "step", {"index": 0})
    assert [e.type for e in seen][-1] == "step"


def test_held_fresh_jobs_wait_for_release_and_cached_ones_do_not():
    """Predict first: while the page waits for the reader, a job the cache cannot answer is
    parked (not sent); a cached one is sent at once (the service answers it from the cache);
    release() sends the parked ones; a parked job dropped by a new group is never sent."""
    runner, service = runner_on_a_page()
    waiting = [True]
    runner.hold_fresh(lambda: waiting[0])
    service.put("sweep_point", {"batch_size": 2}, {"result": {}, "device": DEVICE,
                                                   "measured_at": ""})
    got = []
    runner.run([("sweep_point", {"batch_size": 1}, got.append),
                ("sweep_point", {"batch_size": 2}, got.append)])
    assert [j.params["batch_size"] for j in service.submitted] == [2]  # the cached one
    assert [j.params["batch_size"] for j in runner.held] == [1]
    assert "prediction" in runner.status.message
    runner.submit("sweep_point", {"batch_size": 4}, got.append)  # a new group drops the old
    assert [j.params["batch_size"] for j in runner.held] == [4]
    waiting[0] = False
    runner.release()
    assert [j.params["batch_size"] for j in service.submitted] == [2, 4]
    assert runner.held == [] and [j.params["batch_size"] for j in runner.jobs] == [4]
    runner.add("sweep_point", {"batch_size": 8}, got.append)  # no longer waiting: sent at once
    assert service.submitted[-1].params["batch_size"] == 8

def test_held_with_cached_too_even_cached_jobs_wait_and_the_status_says_one_is_ready():
    """No answer before the prediction: with cached_too a job the cache can answer is parked
    too, the status says a result is ready, and release() sends it (answered from the cache)."""
    runner, service = runner_on_a_page()
    waiting = [True]
    runner.hold_fresh(lambda: waiting[0], cached_too=True)
    service.put("sweep_point", {"batch_size": 2}, {"result": {}, "device": DEVICE,
                                                   "measured_at": ""})
    got = []
    runner.run([("sweep_point", {"batch_size": 2}, got.append)])
    assert service.submitted == [] and got == []
    assert [j.params["batch_size"] for j in runner.held] == [2]
    assert "ready" in runner.status.message
    runner.add("sweep_point", {"batch_size": 1}, got.append)  # one not cached: still waiting
    assert "prediction" in runner.status.message and "ready" not in runner.status.message
    waiting[0] = False
    runner.release()
    assert sorted(j.params["batch_size"] for j in service.submitted) == [1, 2]
    assert runner.held == []


def test_a_group_replaces_the_runners_queued_jobs_in_the_engine_queue():
    runner, service = runner_on_a_page()
    runner.run([("sweep_point", {"batch_size": b}, lambda e: None) for b in (1, 2)])
    runner.add("sweep_point", {"batch_size": 4}, lambda e: None)
    assert [(j.demo, j.replace) for j in service.submitted] == \
        [(runner.demo, True), (runner.demo, False), (runner.demo, False)]
    assert not any(j.nearby for j in service.submitted)  # this page draws no nearby results


def test_a_handler_that_fails_leaves_a_message_not_a_spinner():
    runner, service = runner_on_a_page()

    def broken(event):
        if event.type == "result":
            SweepPointResult.from_dict(event.data)  # a result of the wrong shape: ResultError

    job = runner.submit("sweep_point", {"batch_size": 2}, broken)
    service.send(job, "started")
    service.finish(job, {"batch_size": 2})  # not a SweepPointResult
    assert "could not show what the engine sent (ResultError)" in runner.status.page_error_text
    assert not runner.status.running and not runner.busy
    runner.submit("sweep_point", {"batch_size": 4}, broken)
    assert runner.status.page_error_text == ""  # a new group starts clean


def test_a_nearby_result_is_handed_over_and_labelled_until_the_real_one():
    page = UrlPage()
    service = attach(page)
    runner = JobRunner(page, nearby=True)
    pn.panel(runner.status).get_root()
    seen = []
    job = runner.submit("sweep_point", {"batch_size": 12, "prompt_len": 8, "new_tokens": 4},
                        seen.append)
    assert service.submitted[-1].nearby
    near = {**job.params, "batch_size": 16}
    point = run_job("sweep_point", {"batch_size": 16, "prompt_len": 8, "new_tokens": 4})[1]
    service.send(job, "nearby", point, cached=True, device=DEVICE, measured_at=WHEN, near=near)
    assert [e.type for e in seen] == ["nearby"] and seen[0].result.batch_size == 16
    assert "nearby: a result of batch_size 16 (you asked for 12)" in runner.status.label_text
    assert runner.status.running  # still waiting for its own
    service.finish(job, {"batch_size": 12})
    assert "nearby" not in runner.status.label_text and not runner.status.running
