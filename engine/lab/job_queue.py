"""The engine service's queue: which waiting job the worker runs next, for a classroom.

One worker runs one job at a time, so the order of the queue is what thirty readers feel. A FIFO
lets one reader's dozen roofline points, or a 20-second load test, sit in front of everyone who
arrives after them. Every waiting job has a rank (Rank, smallest first); the rules:

0. Newcomers first. A newcomer is a reader with nothing on screen yet: no result, cached result,
   nearby cached result or run's first partial figure (`answered` ends it). A newcomer's first
   queued job, of any size, ranks NEWCOMER, before every size: everyone else has a number
   already. Newcomers among themselves go in order of arrival; their later jobs queue by the
   rules below. A job asked `aside` (a page's lookup beside its measurements: the GPU box's
   machine description) puts no number on the reader's status line: its answer ends nothing and
   it is never a newcomer's first.
   A reader's first queued point ranks FIRST_POINT, behind the newcomers' first jobs (a
   newcomer's own later point waits behind their first job), and OVERDUE, before everything,
   once it has waited `overdue_s`: a slider's release is to be drawn within seconds and a point
   takes a second at most, one per reader, so a reader's dozen points still take turns. A
   newcomer's first job that has waited `newcomer_due_s` ranks OVERDUE too (and among equal
   ranks a reader never served goes first), so a stream of overdue points cannot hold a
   newcomer's first run back: that run is cut short at its first figure (engine.lab.policy),
   about a point's time.
1. Short before long: each job kind declares its size in the registry ("point" < "run" <
   "load"); a smaller size goes first. A bigger job that has waited `age_s` ranks AGED, right
   behind the points, before younger runs and load tests: a busy class delays it but a slider's
   point does not wait for it. One that has waited `starve_s` counts as a point, so it is never
   starved, even by a class that asks only points.
   A point asked `background` (context a page draws beside the point its reader asked for: the
   knob's batch 1 and half the batch, next to the slider's batch) ranks BACKGROUND, behind every
   run and load test, and ages as they do (AGED, then a point). It is nobody's first point or
   first job; until it counts as a point it pauses no run (`longest_wait` ranks it out); it
   keeps no run paused and cuts no run short (`waiting` leaves it out); a running job's idle
   gap may run it. Three fresh points for every release of a
   knob, as equals, keep a class's worker busy with points alone: a released point waits
   behind other readers' context points, and runs never run.
2. Readers take turns: among jobs of the same rank, the reader (session) served least recently
   goes next, so a reader who just arrived is served before one who has had a job run already
   (and one with nothing on screen yet before one never served who has a cached number); a
   reader's own jobs run in the order they asked for them.
3. One run answers many: queued jobs that ask the same question (same kind and parameters,
   results cacheable) leave the queue together with the first of them (`take` returns them as
   riders).
4. The last position wins: `replace(session, demo)` removes a reader's queued jobs of one demo
   (a slider released again before its last point ran) and returns them, to be cancelled.

The service tells the queue when a reader got a result (`answered`), and when one left (`forget`).
Which sizes may start now (inside a run's pause, say) is engine.lab.policy's to say.

Pure bookkeeping: no threads, no I/O, no clock of its own (callers pass `now`); the service
(engine.lab.dispatcher) holds its lock around every call. Torch-free.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Iterable
from enum import IntEnum

from .events import Job
from .settings import DEFAULT, Settings

SIZES = ("point", "run", "load")  # what a job kind declares (engine.lab.registry), shortest first


class Rank(IntEnum):
    """A waiting job's place in the order, smallest first (the module docstring's rules)."""

    OVERDUE = 0  # a reader's first point, or a newcomer's first job, that has waited too long
    NEWCOMER = 1  # a newcomer's first job, of any size
    FIRST_POINT = 2  # a reader's first queued point: behind newcomers' first jobs
    POINT = 3  # any other point, and a bigger job that has waited starve_s
    AGED = 4  # a run or load test that has waited age_s: behind points, before the rest
    RUN = 5
    LOAD = 6
    BACKGROUND = 7  # context for another point, asked `background`: behind everything, aging


SIZE_RANKS = {"point": Rank.POINT, "run": Rank.RUN, "load": Rank.LOAD}
OVERDUE, NEWCOMER, FIRST_POINT, AGED = Rank.OVERDUE, Rank.NEWCOMER, Rank.FIRST_POINT, Rank.AGED
AGE_S, STARVE_S = DEFAULT.age_s, DEFAULT.starve_s
OVERDUE_S, NEWCOMER_DUE_S = DEFAULT.overdue_s, DEFAULT.newcomer_due_s
MAX_SESSIONS_REMEMBERED = 4096  # when each reader was last served, for the newest readers
Newcomers = bool | Callable[[Job], bool]  # which newcomers' first jobs count: all, none, or these


def question(kind: str, params: dict) -> str:
    """What a job asks, as text: equal for jobs one run can answer (params normalized)."""
    return json.dumps([kind, params], sort_keys=True, separators=(",", ":"))


class JobQueue:
    """The waiting jobs, and the order the worker takes them in (see the module docstring)."""

    def __init__(self, settings: Settings = DEFAULT):
        self.settings = settings
        self._jobs: list[Job] = []  # in order of arrival
        self._ticks = itertools.count(1)
        self._served: dict[str | None, int] = {}  # session -> tick of its last job taken
        self._answered: dict[str | None, int] = {}  # sessions that had a result -> its tick

    def __len__(self) -> int:
        return len(self._jobs)

    def __contains__(self, job: Job) -> bool:
        return any(j is job for j in self._jobs)

    def __iter__(self):
        return iter(list(self._jobs))

    # ---- in and out ----------------------------------------------------------------------------
    def add(self, job: Job) -> None:
        self._jobs.append(job)

    def replace(self, session_id: str | None, demo: str | None) -> list[Job]:
        """Remove and return the session's queued jobs of this demo (none without a demo): its
        newest request replaces them."""
        if demo is None:
            return []
        gone = [j for j in self._jobs if j.session_id == session_id and j.demo == demo]
        self._jobs = [j for j in self._jobs if not (j.session_id == session_id and j.demo == demo)]
        return gone

    def remove(self, job: Job) -> bool:
        """Take a job out without running it (cancelled); False if it was not queued."""
        for i, j in enumerate(self._jobs):
            if j is job:
                del self._jobs[i]
                return True
        return False

    def take(self, now: float, sizes: Iterable[str] = SIZES,
             newcomers: Newcomers = True) -> list[Job]:
        """The job to run next (of these sizes, or a newcomer's first: any unless `newcomers`
        is False, or those it is True for) followed by the queued jobs it also answers (same
        question); all leave the queue. Empty when none waits."""
        lead = self.peek(now, sizes, newcomers)
        return [] if lead is None else self.take_lead(lead)

    def peek(self, now: float, sizes: Iterable[str] = SIZES,
             newcomers: Newcomers = True) -> Job | None:
        """The job `take` would start (it stays queued); None when none waits."""
        sizes, firsts = tuple(sizes), self._newcomer_firsts(newcomers)
        return next((j for j in self.order(now) if self._of(j, sizes, firsts)), None)

    def take_lead(self, lead: Job) -> list[Job]:
        """Take this queued job out to run, with the queued jobs it also answers (riders)."""
        jobs = [lead] + ([j for j in self._jobs if j is not lead and self.shares(lead, j)])
        self._jobs = [j for j in self._jobs if not any(j is t for t in jobs)]
        tick = next(self._ticks)
        for job in jobs:
            self._served[job.session_id] = tick
        self._forget_oldest()
        return jobs

    def answered(self, session_id: str | None) -> None:
        """A reader has a number on the page (a result, measured or cached, a nearby cached one,
        a run's partial figure): no newcomer any more (rule 0). Readers without a session
        (scripts, the warm-up) are never newcomers."""
        if session_id is not None:
            self._answered[session_id] = next(self._ticks)
            self._forget_oldest()

    def newcomer(self, session_id: str | None) -> bool:
        """True for a reader with nothing on screen yet (rule 0); never for a job without a
        reader (a script, the warm-up)."""
        return session_id is not None and session_id not in self._answered

    def urgent(self, besides: Iterable[str | None] = ()) -> int:
        """How many queued jobs of readers other than `besides` are points or newcomers' first
        jobs: what a newcomer's run, once its first figure is on the page, is cut short for
        (engine.lab.policy) rather than holding them for its whole length."""
        return self.waiting(("point",), besides=besides)

    def forget(self, session_id: str | None) -> None:
        """A reader has left: nothing of theirs is kept."""
        self._served.pop(session_id, None)
        self._answered.pop(session_id, None)

    @staticmethod
    def shares(lead: Job, job: Job) -> bool:
        """True if one run of lead answers job too: the same question, both content with a
        result any reader may see (use_cache; a "measure again" lead is fresh for everyone)."""
        return (job.use_cache and lead.question is not None
                and job.question == lead.question)

    # ---- the order ------------------------------------------------------------------------------
    def rank(self, job: Job, now: float, firsts: tuple | None = None) -> Rank:
        """The job's rank now (the module docstring's rules 0 and 1). `firsts`: what _firsts()
        returns, if known."""
        size = SIZE_RANKS.get(job.size, Rank.LOAD)
        waited, times = now - job.submitted_at, self.settings
        if job.background:  # rule 1: behind everything, aging as the big jobs do
            return (Rank.POINT if waited >= times.starve_s else
                    Rank.AGED if waited >= times.age_s else Rank.BACKGROUND)
        newcomers, points = self._firsts() if firsts is None else firsts
        first_point = size is Rank.POINT and points.get(job.session_id) is job
        if first_point and waited >= times.overdue_s:
            return Rank.OVERDUE
        if newcomers.get(job.session_id) is job:
            return Rank.OVERDUE if waited >= times.newcomer_due_s else Rank.NEWCOMER
        if first_point and job.session_id not in newcomers:  # a newcomer's later point waits
            return Rank.FIRST_POINT  # behind their first job
        if size is not Rank.POINT and waited >= times.starve_s:
            return Rank.POINT
        if size is not Rank.POINT and waited >= times.age_s:
            return Rank.AGED
        return size

    def _firsts(self) -> tuple[dict, dict]:
        """By session, in one pass: each newcomer's first queued job (not one asked aside), and
        each reader's first queued point (neither asked background)."""
        newcomers: dict[str | None, Job] = {}
        points: dict[str | None, Job] = {}
        for j in self._jobs:
            if j.background:
                continue  # nobody's first: rule 1
            if (j.session_id is not None and not j.aside and j.session_id not in newcomers
                    and j.session_id not in self._answered):
                newcomers[j.session_id] = j
            if j.size == "point" and j.session_id not in points:
                points[j.session_id] = j
        return newcomers, points

    def order(self, now: float) -> list[Job]:
        """The waiting jobs in the order they will run if nothing else arrives; a job that one
        run answers together with an earlier one is left out (it runs with that one)."""
        by_rank: dict[Rank, dict[str | None, list[Job]]] = {}
        firsts = self._firsts()
        for job in self._jobs:  # arrival order: each reader's jobs stay in their order
            rank = self.rank(job, now, firsts)
            by_rank.setdefault(rank, {}).setdefault(job.session_id, []).append(job)
        order: list[Job] = []
        for rank in sorted(by_rank):
            sessions = by_rank[rank]
            # least recently served first; a reader never served (-1) before everyone else,
            # one with nothing on screen yet (-2) before those, ties by who has waited longest
            turns = sorted(sessions, key=lambda s: (
                self._served.get(s, -2 if self.newcomer(s) else -1), sessions[s][0].submitted_at))
            order += _round_robin(sessions[s] for s in turns)
        return _first_of_each_question(order)

    def others_waiting(self, sessions: Iterable[str | None]) -> int:
        """How many queued jobs belong to readers other than these: what a re-measure of their
        run would hold up (a reader's own next points wait behind it in any case)."""
        mine = set(sessions)
        return sum(j.session_id not in mine for j in self._jobs)

    def longest_wait(self, now: float, rank: Rank = Rank.POINT, sizes: Iterable[str] = SIZES,
                     besides: Iterable[str | None] = (), newcomers: Newcomers = True) -> float:
        """Seconds the longest-waiting job of this rank (or smaller) and of these sizes (or a
        newcomer's first, as in `take`) has waited, of readers other than `besides`; 0 for
        none."""
        sizes, mine, firsts = tuple(sizes), set(besides), self._firsts()
        of = self._newcomer_firsts(newcomers, firsts)
        waits = [now - j.submitted_at for j in self._jobs
                 if self.rank(j, now, firsts) <= rank and self._of(j, sizes, of)
                 and j.session_id not in mine]
        return max(waits, default=0.0)

    def waiting(self, sizes: Iterable[str], newcomers: Newcomers = True,
                besides: Iterable[str | None] = (), background: bool = False) -> int:
        """How many queued jobs of readers other than `besides` are of these sizes (a
        newcomer's first job counts as any, as in `take`); jobs asked `background` only with
        `background` (rule 1: they hold nothing up)."""
        sizes, mine = tuple(sizes), set(besides)
        firsts = self._newcomer_firsts(newcomers)
        return sum(self._of(j, sizes, firsts) and j.session_id not in mine
                   and (background or not j.background) for j in self._jobs)

    def _newcomer_firsts(self, newcomers: Newcomers, firsts: tuple | None = None) -> dict:
        """Each newcomer's first job by session, of those `newcomers` takes in: all (True),
        none (False), or those a predicate is True for. `firsts`: _firsts(), if known."""
        if newcomers is False:
            return {}
        found = (self._firsts() if firsts is None else firsts)[0]
        if newcomers is True:
            return found
        return {s: j for s, j in found.items() if newcomers(j)}

    def _of(self, job: Job, sizes: tuple[str, ...], newcomers: dict) -> bool:
        """True if the job is of these sizes, or a newcomer's first (rule 0: of any size, it
        is taken even inside another job's pause, and counts as waiting for one). `newcomers`:
        each newcomer's first job by session (_firsts()[0]); empty to leave newcomers out."""
        return job.size in sizes or newcomers.get(job.session_id) is job

    def position(self, job: Job, now: float) -> int | None:
        """How many runs come before this job's; None if it is not queued."""
        order = self.order(now)
        for i, j in enumerate(order):
            if j is job or self.shares(j, job):
                return i
        return None

    def _forget_oldest(self) -> None:
        """Keep the newest half of each record once it outgrows MAX_SESSIONS_REMEMBERED (a
        reader forgotten is only served as if new)."""
        for name in ("_served", "_answered"):
            record = getattr(self, name)
            if len(record) > MAX_SESSIONS_REMEMBERED:
                keep = sorted(record.items(), key=lambda kv: kv[1])[MAX_SESSIONS_REMEMBERED // 2:]
                setattr(self, name, dict(keep))


def _round_robin(queues: Iterable[list[Job]]) -> list[Job]:
    """One job from each queue in turn, in the queues' order, until all are empty."""
    queues = [list(q) for q in queues]
    out: list[Job] = []
    for i in range(max((len(q) for q in queues), default=0)):
        out += [q[i] for q in queues if i < len(q)]
    return out


def _first_of_each_question(order: list[Job]) -> list[Job]:
    """The order without the jobs an earlier one answers (see JobQueue.shares)."""
    asked: set[str] = set()
    out: list[Job] = []
    for job in order:
        if job.use_cache and job.question in asked:
            continue
        out.append(job)
        if job.question is not None:
            asked.add(job.question)
    return out
