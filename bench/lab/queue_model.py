"""A class on the engine service's real queue and policy, with the worker's job times modeled:
where a knob reader's wait from a slider release to its point goes.

    python bench/lab/queue_model.py [--students 30] [--seeds 6] [--point-scale 1.0]
                                    [--context background|foreground|none]

No engine, no server, no clock: engine.lab.job_queue and engine.lab.policy decide as they do in
the service, and this script plays the dispatcher and the worker in steps of DT seconds (a cached
question answered at once, a job asking a running question joining it, a pause taken at the next
step, a run's first figure at a set time into it, a reader's cancel). The readers follow
bench/lab/classroom.py's class (MIX's weights, arrivals over 30 s, a slider released every
10-25 s once the last release was answered); the knob's readers ask what lessons/knob.py asks
(the slider's batch, half of it and 1; queued points no longer wanted cancelled), with the two
context points asked `--context`: in the background (engine.lab.job_queue rule 1), as plain
points (foreground), or not at all.

Job times are a model, not a measurement: a knob point on `mini` costs about what
engine.lab.registry.point_seconds says at one core's bandwidth and FLOPs plus a job's overhead,
times --point-scale (1.5 puts the model near bench/results/classroom.md's quiet run at 30 on
VM D); the other lessons' runs take a few seconds to a few tens of seconds, their first figure
a second or two in. So its figures compare rules with each other, never with a target: the
class bench measures those. Prints one JSON object: per --context, the releases' p50, p95 and
max, the releases never drawn, the run lessons' releases shown and never shown, the readers
with no full result at the end, the worker's seconds by job size, and the share of the knob
readers' waiting spent on each thing the worker did meanwhile.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: engine

from engine.lab import policy  # noqa: E402
from engine.lab.events import Job  # noqa: E402
from engine.lab.job_queue import JobQueue, question  # noqa: E402
from engine.lab.policy import Action  # noqa: E402
from engine.lab.runs import Run, RunState  # noqa: E402
from engine.lab.settings import DEFAULT  # noqa: E402

DT = 0.05  # seconds a step of the model
KNOB_VALUES = [3, 5, 10, 20, 28, 40, 48, 64]  # bench/lab/classroom.py's MIX
MIX = ["knob"] * 4 + ["three-schedules"] * 2 + ["average-lies"] * 2 + [
    "roofline", "kv-cache", "chunked-prefill", "slo-goodput"]
# lesson: (kind, size, seconds, first figure after (s) or None, slider settings or 0)
RUNS = {"three-schedules": ("serve_run", "run", 3.5, 1.0, 4),
        "average-lies": ("load_test", "load", 12.0, 1.5, 3),
        "chunked-prefill": ("serve_run", "run", 5.0, 1.5, 4),
        "slo-goodput": ("rate_sweep", "load", 14.0, 1.5, 0),
        "kv-cache": ("block_snapshots", "run", 2.0, None, 0)}
ROOFLINE_POINTS, ROOFLINE_S = 6, 3.0  # the small preset's points: run-sized on a CPU


def mini_point_s(batch: int, prompt: int, new: int, scale: float) -> float:
    """A knob point on mini: the job's overhead, the shared prompt's prefill, new - 1 decode
    steps (the weights' read, then the products' FLOPs as the batch grows)."""
    return scale * (0.15 + 0.0007 * prompt + (new - 1) * (0.008 + 0.00075 * batch))


@dataclass
class Work:
    """What the model knows of a job beyond the service's Job: its time and first figure."""

    seconds: float
    figure_s: float | None = None


class Worker:
    """The dispatcher and the worker, modeled (see the module docstring)."""

    def __init__(self, settings=DEFAULT):
        self.settings = settings
        self.queue = JobQueue(settings)
        self.now = 0.0
        self.running: Run | None = None
        self.paused: list[Run] = []
        self.left: dict[int, float] = {}  # run id -> seconds of work left
        self.work: dict[int, Work] = {}
        self.owner: dict[int, object] = {}  # job id -> reader
        self.cache: set[str] = set()
        self.ids = iter(range(1, 10**9))
        self.busy = {"point": 0.0, "run": 0.0, "load": 0.0}

    def submit(self, reader, kind: str, params: dict, size: str, work: Work, *,
               pausable: bool = True, background: bool = False) -> Job:
        job = Job(next(self.ids), kind, params, session_id=reader.sid, size=size,
                  question=question(kind, params), pausable=pausable,
                  figures=work.figure_s is not None, submitted_at=self.now,
                  background=background)
        self.work[job.id], self.owner[job.id] = work, reader
        run = self.running
        if job.question in self.cache:
            self.finish(job)
        elif run is not None and not run.cancelling and JobQueue.shares(run.lead, job):
            run.jobs.append(job)
            job.state = "running"
        else:
            self.queue.add(job)
        return job

    def finish(self, job: Job) -> None:
        job.state = "done"
        self.queue.answered(job.session_id)
        self.owner[job.id].answered(job, self.now)

    def cancel(self, job: Job) -> None:
        """A reader's cancel: a queued job leaves; a run it alone was in stops."""
        if job.state != "queued" and job.state != "running":
            return
        if not self.queue.remove(job):
            for run in (self.running, *self.paused):
                if run is None or job not in run.jobs:
                    continue
                run.jobs.remove(job)
                if not run.jobs and run is self.running:
                    self.running = None
                elif not run.jobs:
                    self.paused.remove(run)
        job.state = "cancelled"

    def step(self) -> None:
        for job in list(self.queue):
            if job.question in self.cache:
                self.queue.remove(job)
                self.finish(job)
        run = self.running
        if run is not None:
            self._work(run)
        for _ in range(8):
            decision = policy.decide(self.queue, self.running, self.paused, None, self.now,
                                     self.settings)
            if decision.action in (Action.WAIT, Action.LEND_GAP):
                break
            self._apply(decision)
        self.now += DT

    def _work(self, run: Run) -> None:
        lead = run.lead
        self.busy[lead.size] += DT
        self.left[run.id] -= DT
        figure_s = self.work[lead.id].figure_s
        if (figure_s is not None and not run.figured
                and self.left[run.id] <= self.work[lead.id].seconds - figure_s):
            cut = policy.at_first_figure(self.queue, run).action is Action.CUT_SHORT
            for job in run.jobs:
                self.queue.answered(job.session_id)
            run.figured = True
            if cut:  # queued again whole, its arrival kept
                self.running = None
                for job in run.jobs:
                    job.state, job.started_at = "queued", None
                    self.queue.add(job)
                return
        if self.left[run.id] <= 0:
            self.running = None
            self.cache.add(lead.question)
            for job in run.jobs:
                self.finish(job)
        elif run.state is RunState.PAUSING:  # between two steps
            run.state, run.paused_at = RunState.PAUSED, self.now
            self.paused.append(run)
            self.running = None

    def _apply(self, decision) -> None:
        if decision.action is Action.START:
            jobs = self.queue.take_lead(decision.job)
            for job in jobs:
                job.state, job.started_at = "running", self.now
            run = Run(jobs[0].id, jobs, figure_only=decision.figure_only, started_at=self.now)
            self.left[run.id] = self.work[jobs[0].id].seconds
            self.running = run
        elif decision.action is Action.PAUSE:
            decision.run.state = RunState.PAUSING
        elif decision.action is Action.RESUME:
            self.paused.pop()
            decision.run.state, decision.run.started_at = RunState.RUNNING, self.now
            self.running = decision.run
        else:
            raise ValueError(f"the model does not apply {decision.action}")


@dataclass
class Reader:
    sid: str
    arrives_s: float
    rng: random.Random
    next_release_s: float = 0.0
    started: bool = False
    pending_s: float | None = None  # when the release now waiting for its answer happened
    waits: list[float] = field(default_factory=list)  # release to answer, seconds
    first_full_s: float | None = None


class KnobReader(Reader):
    """lessons/knob.py's asks: the slider's batch, and half of it and 1 as its context."""

    def __init__(self, sid, arrives_s, rng, prompt, new, batch, context, scale):
        super().__init__(sid, arrives_s, rng)
        self.prompt, self.new, self.batch = prompt, new, batch
        self.context, self.scale = context, scale
        self.measured: set[int] = set()
        self.asked: dict[int, Job] = {}

    def wanted(self) -> list[int]:
        b = self.batch
        extra = [b // 2, 1] if b > 1 and self.context != "none" else []
        return list(dict.fromkeys([b, *extra]))

    def measure(self, w: Worker) -> None:
        wanted, background = self.wanted(), self.context == "background"
        for batch, job in list(self.asked.items()):
            part_changed = background and job.background != (batch != self.batch)
            if job.state == "queued" and (batch not in wanted or part_changed):
                w.cancel(job)
            if job.state != "queued" and job.state != "running":
                del self.asked[batch]
        for batch in wanted:
            if batch in self.measured or batch in self.asked:
                continue
            params = {"preset": "mini", "batch_size": batch, "prompt_len": self.prompt,
                      "new_tokens": self.new, "shared_prompt": True}
            work = Work(mini_point_s(batch, self.prompt, self.new, self.scale))
            self.asked[batch] = w.submit(self, "sweep_point", params, "point", work,
                                         background=background and batch != self.batch)
        self.drawn(w.now)

    def drawn(self, now: float) -> None:
        if self.pending_s is not None and self.batch in self.measured:
            self.waits.append(now - self.pending_s)
            self.pending_s = None

    def answered(self, job: Job, now: float) -> None:
        self.measured.add(job.params["batch_size"])
        self.first_full_s = self.first_full_s if self.first_full_s is not None else now
        self.drawn(now)

    def act(self, w: Worker) -> None:
        if not self.started and w.now >= self.arrives_s:
            self.started, self.next_release_s = True, w.now + self.rng.uniform(15, 25)
            self.measure(w)
        elif self.started and w.now >= self.next_release_s:
            value = self.rng.choice(KNOB_VALUES)
            if self.pending_s is None and value != self.batch:
                self.batch, self.pending_s = value, w.now
                self.measure(w)
            self.next_release_s = w.now + self.rng.uniform(10, 25)


class RunReader(Reader):
    """A run lesson: its run at arrival, a new one at each release, replacing its own."""

    def __init__(self, sid, arrives_s, rng, lesson):
        super().__init__(sid, arrives_s, rng)
        self.kind, self.size, self.seconds, self.figure_s, self.settings = RUNS[lesson]
        self.setting = 0
        self.job: Job | None = None

    def ask(self, w: Worker) -> None:
        if self.job is not None:
            w.cancel(self.job)
        self.job = w.submit(self, self.kind, {"lesson": self.kind, "setting": self.setting},
                            self.size, Work(self.seconds, self.figure_s))

    def answered(self, job: Job, now: float) -> None:
        self.first_full_s = self.first_full_s if self.first_full_s is not None else now
        if self.pending_s is not None:
            self.waits.append(now - self.pending_s)
            self.pending_s = None

    def act(self, w: Worker) -> None:
        if not self.started and w.now >= self.arrives_s:
            self.started, self.next_release_s = True, w.now + self.rng.uniform(15, 25)
            self.ask(w)
        elif self.started and self.settings and w.now >= self.next_release_s:
            if self.pending_s is None:
                self.setting, self.pending_s = self.rng.randrange(self.settings), w.now
                self.ask(w)
            self.next_release_s = w.now + self.rng.uniform(10, 25)


class RooflineReader(Reader):
    """A dozen-point lesson on the small preset: its points, run-sized, at arrival."""

    def answered(self, job: Job, now: float) -> None:
        self.first_full_s = self.first_full_s if self.first_full_s is not None else now

    def act(self, w: Worker) -> None:
        if not self.started and w.now >= self.arrives_s:
            self.started = True
            for i in range(ROOFLINE_POINTS):
                w.submit(self, "sweep_point", {"preset": "small", "i": i}, "run",
                         Work(ROOFLINE_S * (0.5 + i / ROOFLINE_POINTS)))


def a_class(students: int, seed: int, context: str, scale: float, arrive_s: float = 30.0,
            class_s: float = 90.0) -> dict:
    """One class; what its readers waited and where the knob readers' waits went."""
    w, rng = Worker(), random.Random(seed)
    readers: list[Reader] = []
    for n in range(students):
        lesson, at, own = MIX[n % len(MIX)], n * arrive_s / students, random.Random(seed * 1000 + n)
        if lesson == "knob":
            readers.append(KnobReader(f"s{n}", at, own, rng.choice([32, 64, 96]),
                                      rng.choice([16, 32]), rng.choice([2, 4, 8, 16, 32]),
                                      context, scale))
        elif lesson == "roofline":
            readers.append(RooflineReader(f"s{n}", at, own))
        else:
            readers.append(RunReader(f"s{n}", at, own, lesson))
    spent: dict[str, float] = {}
    while w.now < class_s:
        for reader in readers:
            reader.act(w)
        waiting = [r for r in readers if isinstance(r, KnobReader) and r.pending_s is not None]
        for reader in waiting:
            what = doing(w, reader)
            spent[what] = spent.get(what, 0.0) + DT
        w.step()
    knob = [r for r in readers if isinstance(r, KnobReader)]
    runs = [r for r in readers if isinstance(r, RunReader)]
    return {"releases": [s for r in knob for s in r.waits],
            "never_drawn": sum(r.pending_s is not None for r in knob),
            "run_releases_shown": sum(len(r.waits) for r in runs),
            "run_releases_never_shown": sum(r.pending_s is not None for r in runs),
            "no_full_result": sum(r.first_full_s is None for r in readers),
            "busy_s": w.busy, "spent": spent}


def doing(w: Worker, reader: KnobReader) -> str:
    """What the worker does while this knob reader waits for their released point."""
    run = w.running
    if run is None:
        return "nothing (between jobs)"
    if run.lead.size != "point":
        return f"a {run.lead.size}"
    if any(job.session_id == reader.sid for job in run.jobs):
        return "the reader's own point"
    owner = w.owner[run.lead.id]
    if isinstance(owner, KnobReader) and run.lead.params["batch_size"] != owner.batch:
        return "another reader's context point"
    return "another reader's released point"


def percentile(values: list[float], p: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))], 2)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--students", type=int, default=30)
    parser.add_argument("--seeds", type=int, default=6)
    parser.add_argument("--point-scale", type=float, default=1.0)
    parser.add_argument("--context", choices=["background", "foreground", "none", "all"],
                        default="all")
    args = parser.parse_args(argv)
    if args.students < 1 or args.seeds < 1 or args.point_scale <= 0:
        parser.error("--students and --seeds must be at least 1, --point-scale above 0")
    contexts = ["foreground", "background", "none"] if args.context == "all" else [args.context]
    out: dict = {"model": "queue_model", "students": args.students, "seeds": args.seeds,
                 "point_scale": args.point_scale, "by_context": {}}
    for context in contexts:
        classes = [a_class(args.students, seed, context, args.point_scale)
                   for seed in range(args.seeds)]
        releases = [s for c in classes for s in c["releases"]]
        spent: dict[str, float] = {}
        for c in classes:
            for what, s in c["spent"].items():
                spent[what] = spent.get(what, 0.0) + s
        total = sum(spent.values()) or 1.0
        out["by_context"][context] = {
            "release_to_drawn_s": {"n": len(releases), "p50": percentile(releases, 50),
                                   "p95": percentile(releases, 95),
                                   "max": percentile(releases, 100)},
            **{key: sum(c[key] for c in classes) for key in (
                "never_drawn", "run_releases_shown", "run_releases_never_shown",
                "no_full_result")},
            "worker_busy_s": {size: round(sum(c["busy_s"][size] for c in classes), 1)
                              for size in ("point", "run", "load")},
            "knob_waits_spent_on": {what: round(s / total, 2) for what, s in
                                    sorted(spent.items(), key=lambda kv: -kv[1])},
        }
    return out


if __name__ == "__main__":
    print(json.dumps(main(), indent=1))
