"""The worker's messages as the dispatcher (engine.lab.dispatcher) handles them: hello, fatal,
an event of a run (progress, token, step, error, cancelled), a result, "paused" (a run stopped
between two steps for shorter jobs) and "gap" (a run's serving loop has idle time to lend). A
mixin of Dispatcher: every method runs under its lock, on its thread. Torch-free.
"""

from __future__ import annotations

import logging
import time

from ..errors import ResultError
from . import policy, registry
from .cache import disturbed
from .endpoint import measured_on
from .events import FINAL_EVENTS, JobEvent, one_line
from .policy import Action, Decision
from .results import parse_result
from .runs import Run, RunState
from .supervisor import Worker

log = logging.getLogger("engine.lab.dispatcher")


class WorkerMessages:
    """Dispatcher's handling of what the worker sends (see the module docstring)."""

    def handle(self, w: Worker, message: tuple) -> None:
        """One message from the worker."""
        tag = message[0]
        with self.lock:
            if tag == "hello":
                self.supervisor.hello(w, message[1])
            elif tag == "fatal":
                self.supervisor.start_error = message[1]
            elif tag == "paused":
                self._was_paused(w, message[1])
            elif tag == "gap":
                self._fill(w, message[1])
            elif tag == "result":
                self._result(w, message[1], message[2], message[3])
            else:
                self._event(w, message[1], message[2], message[3])

    def _run_of(self, run_id: int) -> Run | None:
        """The running run, or the one lent a gap, with this id; None for one given up
        (cancelled, or its worker replaced)."""
        return next((r for r in (self.running, self.filling) if r and r.id == run_id), None)

    def _ended(self, run: Run, measured: bool) -> None:
        """A run has ended (result, error or cancelled): the worker is free of it."""
        if run is self.filling:
            self.filling = None
            if self.running is not None:  # the gap it was lent is not the run's turn
                self.running.started_at += time.time() - run.started_at
        else:
            self.running = None
        self._runs_ended += 1
        self.counts["jobs_done"] += measured  # measured; cache answers count as hits
        self.counts["shared_runs"] += measured and len(run.jobs) > 1

    def _result(self, w: Worker, run_id: int, result: dict, measured_at: str) -> None:
        run = self._run_of(run_id)
        if run is None:
            return
        jobs, lead = list(run.jobs), run.lead
        self._ended(run, True)
        device = measured_on(lead.params) or w.device
        try:
            parse_result(lead.kind, result)  # pages read records: check it once, here
        except ResultError as e:
            log.error("job %s (%s) returned a malformed result: %s", run.id, lead.kind, e)
            self.metrics.on_result(run.id, lead.params, {})
            for job in jobs:
                self.finish(job, "error", {"message": f"the engine's result was malformed: "
                                                      f"{one_line(e)}"})
            return
        self.metrics.on_result(run.id, lead.params, result)  # the engine's work, once a run
        now = time.time()
        ran_s = now - (lead.started_at or now)
        waited_s = (lead.started_at or lead.submitted_at) - lead.submitted_at
        quiet = not disturbed(result)
        if not quiet:
            self.counts["disturbed"] += 1
            again = policy.measure_again(self.queue, run, registry.get_spec(lead.kind).cacheable,
                                         self.settings)
            waiting = self.queue.others_waiting(run.sessions)
            log.info("job %s (%s %s, %d readers) waited %.1f s, ran %.1f s: disturbed (%s); "
                     "%s", run.id, lead.kind, lead.size, len(jobs), waited_s, ran_s,
                     "; ".join(result["check"].get("reasons") or ["?"]),
                     "measured again" if again else
                     f"not measured again: {waiting} jobs of others wait" if waiting else "final")
            if again:
                self._remeasure(jobs, result, device=device, measured_at=measured_at)
                return
            self.counts["disturbed_final"] += bool(waiting)
        else:
            log.info("job %s (%s %s, %d readers) waited %.1f s, ran %.1f s", run.id, lead.kind,
                     lead.size, len(jobs), waited_s, ran_s)
        result = self.answers.store(lead, jobs, w, result, measured_at)
        for job in jobs:
            self.finish(job, "result", result, device=device, measured_at=measured_at,
                        readers=len(jobs))

    def _event(self, w: Worker, run_id: int, type_: str, data: dict) -> None:
        run = self._run_of(run_id)
        if run is None:
            return
        jobs, final = list(run.jobs), type_ in FINAL_EVENTS
        self.metrics.on_event(run.id, run.lead.params, type_, data)
        if final:
            self._ended(run, False)
        if final and type_ == "cancelled" and run.state.requeues:
            self._requeue(run)
            return
        if final and type_ == "cancelled" and run.state is RunState.GIVING_WAY:
            self.counts["disturbed_final"] += 1
            for job in jobs:  # the disturbed result they were shown, now final
                self.finish(job, "result", job.result, device=job.device,
                            measured_at=job.measured_at, readers=len(jobs))
            return
        if type_ == "progress" and (data.get("so_far") or {}).get("e2e_p50_ms") is not None:
            # a run's first partial figure is on its readers' pages (widgets.job_status)
            self.apply(w, policy.at_first_figure(self.queue, run))
            for job in jobs:
                self._answered(job, "first figure")
            run.figured = True
        if type_ == "progress" and "building" in data:
            self._building(w, run, bool(data["building"]))
        for job in jobs:
            if type_ == "progress":
                job.progress = data
            if final:
                self.finish(job, type_, data)
            else:
                self.outbox.put(job, JobEvent(job.id, job.kind, type_, data))

    def _building(self, w: Worker, run: Run, building: bool) -> None:
        """The worker says whether it builds the run's engine now."""
        if building and run.state is RunState.RUNNING:
            run.state = RunState.BUILDING
            if run is self.filling:  # a gap is no place for a model's build: stopped at its
                self._tell(w, Decision(Action.STOP_BUILD, run))  # next step, kept, requeued
        elif not building and run.building:
            if run.state is RunState.STOPPING_BUILD and w.cancel_id.value == -run.id:
                w.cancel_id.value = 0  # built before it could be stopped
            run.state = RunState.RUNNING

    def _was_paused(self, w: Worker, run_id: int) -> None:
        """The worker has paused the running job (between two steps) and waits for other jobs:
        tell its readers; the next pump sends the next one."""
        run = self.running
        if run is None or run.id != run_id:  # not ours (cannot happen): let it end
            w.cancel_id.value = run_id
            w.send(("resume", run_id))
            return
        # (cancelled while it was being paused: it goes on at once, to stop)
        run.state = RunState.CANCELLING if run.cancelling else RunState.PAUSED
        run.paused_at = time.time()
        self.paused.append(run)
        self.running = None
        self.counts["preemptions"] += 1
        ahead = self.queue.waiting(policy.smaller(run))
        for job in run.jobs:
            job.paused += 1
            self.outbox.put(job, JobEvent(job.id, job.kind, "queued", {
                "ahead": ahead, "preempted": True, "resumes": True}))
        self.outbox.wake()

    def _fill(self, w: Worker, run_id: int) -> None:
        """The running job's serving loop has an idle gap and asks for a point to run there:
        send the one the policy picks, or "nofill" (it waits for an answer: always one)."""
        decision = (policy.WAIT if self.stopping else
                    policy.fill_gap(self.queue, self.running, self.filling, run_id, time.time()))
        w.fill_id.value = 0  # until this one has ended
        if decision.action is Action.LEND_GAP:
            jobs = self.queue.take_lead(decision.job)
            if self.running.lead.kind == registry.CLASS_KIND:  # measured between the class's
                for job in jobs:  # requests, not on an idle engine: never cached as isolated
                    job.use_cache = False
            fill = self.filling = Run(jobs[0].id, jobs)
            self.counts["gap_fills"] += 1
            # never a quiet wait, even for a re-measure: the run whose gap it is would wait
            # through it past its next arrival
            self._send_run(w, fill, {}, gap=True)
        else:
            w.send(("nofill", run_id))

