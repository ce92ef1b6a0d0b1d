"""The classroom scheduler's rules as pure functions: given the queue, the running run, the
paused stack and the time, what the service does next (a Decision). No threads, no clock of its
own (callers pass `now`), no I/O; engine.lab.dispatcher applies what it decides. Torch-free.

The queue's own order (newcomers first, short before long, readers in turn, aging) is
engine.lab.job_queue's; the rules here say when the running work gives way to it:

- Pause (give way): once a short job of another reader (a point, or a newcomer's first job of
  any size) has waited `preempt_after_s` and the running run has had a turn of `turn_s` since
  it started or went on, a long pausable run (a load test, a schedule run, a rate sweep, a
  small preset's point on a CPU) is paused between two of its steps, outside what it times,
  for jobs smaller than itself; the worker runs them inside the pause. A run building its
  engine is stopped between two steps of the build instead (for points and runs; the worker
  keeps the half-built engine, and the run is queued again: STOP_BUILD).
- The pause stack: a run started inside a pause may be paused in turn, for points only, up to
  `max_paused` deep (each holds an engine); the innermost goes on first. One more place is kept
  for points: the run inside the max_paused-th pause is paused for points only, and inside that
  pause only points start, and newcomers' first runs that show a partial figure soon (schedule
  runs, load tests, rate sweeps), started `figure_only`: never paused, they stop at their first
  figure whoever waits. So whatever runs, a point gets in within one step of it or of a
  newcomer's first figure.
- Resume: the innermost paused run goes on once nothing it gives way to waits; after
  `max_pause_s`, at the first moment no other reader's point or newcomer's first job waits
  (before the runs and load tests queued inside its pause); after `hard_pause_s`, whatever
  waits, so it always ends; and at once to stop, when every reader left it.
- Cut short: a newcomer's first run is urgent only until its first partial figure is on the
  page. Then, if other readers' points or newcomers' first jobs wait, it is stopped and queued
  again whole, to wait by the size rule, so newcomers' runs do not fill the pause stack.
- Give way: a re-measure of a disturbed result stops (even in its wait for quiet) once another
  reader's job waits; its readers' disturbed result, labelled, stands as final. A disturbed
  result is measured again only while no other reader's job waits, at most `remeasures` times.
- Lend a gap: while another reader's point waits (one asked `background` too), a running job
  whose serving loop has nothing to do until its next arrival lends that idle gap to one point
  (engine.lab.worker.fill_gap).
- A point asked `background` (context for a point its reader asked for) gives way to all of
  the above and starts nothing of them: it pauses no run, keeps no run paused, cuts no
  newcomer's run short; it waits for a free worker with nothing else to do, or a gap, or its
  age (engine.lab.job_queue rule 1).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum

from .events import Job
from .job_queue import SIZES, JobQueue, Newcomers
from .runs import Run, RunState
from .settings import DEFAULT, Settings

BUILD_GIVES_WAY_TO = ("point", "run")  # the sizes of jobs an engine's build is stopped for
GAP_SIZES = ("point",)  # the jobs a running job's idle gap may run


class Action(Enum):
    """What the service does next."""

    START = "start"  # send `job` (and the queued jobs it answers) to the free worker
    PAUSE = "pause"  # pause `run` between two of its steps
    STOP_BUILD = "stop build"  # stop `run`'s engine build between two steps; queue it again
    RESUME = "resume"  # let the innermost paused `run` go on (or stop, when cancelled)
    CUT_SHORT = "cut short"  # stop `run` at its first figure; queue it again whole
    GIVE_WAY = "give way"  # stop the re-measure `run`; its first result stands
    LEND_GAP = "lend gap"  # `run`'s idle gaps may run a waiting point (`job`, when asked)
    WAIT = "wait"  # nothing to do until something changes


@dataclass(frozen=True)
class Decision:
    action: Action
    run: Run | None = None  # the run it acts on
    job: Job | None = None  # START, LEND_GAP for a gap asked: the job to run
    figure_only: bool = False  # START: never paused, it stops at its first figure
    why: str = ""


WAIT = Decision(Action.WAIT)


def decide(queue: JobQueue, running: Run | None, paused: Sequence[Run], filling: Run | None,
           now: float, settings: Settings = DEFAULT) -> Decision:
    """The next thing to do. With a run running: give way, pause it, stop its build, lend its
    gaps, or wait. With the worker free: resume the innermost paused run, start the next job
    the queue gives for what may start now, or wait."""
    if running is not None:
        return (give_way(queue, running) or preempt(queue, running, paused, now, settings)
                or (Decision(Action.LEND_GAP, running)
                    if lends_gaps(queue, running, filling, settings) else WAIT))
    if paused:
        decision = resume(queue, paused, now, settings)
        if decision is not None:
            return decision
    lead = queue.peek(now, *may_start(paused, settings))
    if lead is None:
        return WAIT
    figure_only = bool(len(paused) >= settings.max_paused and lead.figures
                       and queue.newcomer(lead.session_id))
    return Decision(Action.START, job=lead, figure_only=figure_only)


def may_start(paused: Sequence[Run], settings: Settings = DEFAULT
              ) -> tuple[tuple[str, ...], Newcomers]:
    """The sizes of the jobs the free worker may start now, and which newcomers' first jobs of
    any size may (JobQueue.take): any with nothing paused; inside a pause, those smaller than
    the innermost paused run, and newcomers' firsts; past max_paused, the place kept for
    points: points, and newcomers' first jobs that show a partial figure soon (figure_only).
    The rest wait for the innermost run to end."""
    if not paused:
        return SIZES, True
    if len(paused) > settings.max_paused:
        return ("point",), figures_soon
    return smaller(paused[-1]), True


def smaller(run: Run) -> tuple[str, ...]:
    """The sizes of the jobs a paused run gives way to: those smaller than its own, so a
    schedule run is never swapped for another (a newcomer's first job counts as any size)."""
    size = run.lead.size
    return SIZES[:SIZES.index(size)] if size in SIZES else BUILD_GIVES_WAY_TO


def figures_soon(job: Job) -> bool:
    """True for a job that shows a partial figure soon after it starts (registry: `figures`)."""
    return job.figures


def give_way(queue: JobQueue, run: Run) -> Decision | None:
    """GIVE_WAY for a re-measure (a job with a disturbed result shown) while another reader's
    job waits."""
    if (run.state.told or run.lead.remeasures == 0 or run.lead.result is None
            or not queue.others_waiting(run.sessions)):
        return None
    return Decision(Action.GIVE_WAY, run, why=f"{len(queue)} jobs wait")


def preempt(queue: JobQueue, run: Run, paused: Sequence[Run], now: float,
            settings: Settings = DEFAULT) -> Decision | None:
    """PAUSE or STOP_BUILD once another reader's shorter job has waited preempt_after_s and the
    run has had its turn (see the module docstring); None otherwise."""
    if run.state.told:
        return None
    if run.building:
        sizes: tuple[str, ...] = BUILD_GIVES_WAY_TO
    elif run.figure_only:
        return None  # it stops at its first figure, a second or so in
    elif (len(paused) <= settings.max_paused and run.lead.size != "point"
          and all(j.pausable for j in run.jobs)):
        sizes = ("point",) if paused else smaller(run)
    else:
        return None
    # the place past max_paused is for points: a run paused into it is paused for them alone
    # (not for a newcomer's long first job), so what runs there is a point or a figure_only run
    newcomers = run.building or len(paused) < settings.max_paused
    if (now - run.started_at < settings.turn_s
            or queue.longest_wait(now, sizes=sizes, newcomers=newcomers, besides=run.sessions)
            < settings.preempt_after_s):
        return None  # (a reader's own jobs wait behind theirs in any case)
    action = Action.STOP_BUILD if run.building else Action.PAUSE
    return Decision(action, run, why=f"{len(queue)} jobs wait, {len(paused)} paused")


def resume(queue: JobQueue, paused: Sequence[Run], now: float,
           settings: Settings = DEFAULT) -> Decision | None:
    """RESUME the innermost paused run (the worker is free, inside its pause) when it is due
    (see the module docstring); None while it waits."""
    run = paused[-1]
    sizes, newcomers = may_start(paused, settings)
    paused_s = now - run.paused_at
    if run.cancelling:
        why = "to stop"
    elif not queue.waiting(sizes, newcomers):
        why = "nothing it gives way to waits"
    elif paused_s >= settings.hard_pause_s:
        why = "paused longest"
    elif paused_s >= settings.max_pause_s and not queue.waiting(
            ("point",), newcomers, besides=run.sessions):
        why = "no point waits"
    else:
        return None
    return Decision(Action.RESUME, run, why=why)


def lends_gaps(queue: JobQueue, run: Run | None, filling: Run | None,
               settings: Settings = DEFAULT) -> bool:
    """True if the running run's idle gaps may run a waiting point now: one at a time, while
    another point waits (a newcomer's long first job is no point)."""
    return bool(settings.lend_gaps and run is not None and filling is None
                and not run.cancelling
                and queue.waiting(GAP_SIZES, newcomers=False, background=True) > 0)


def fill_gap(queue: JobQueue, running: Run | None, filling: Run | None, run_id: int,
             now: float) -> Decision:
    """The run `run_id` has an idle gap and asks for a point to run there: LEND_GAP with the
    point the queue picks, or WAIT (no point: the worker goes on)."""
    if (running is None or running.id != run_id or filling is not None
            or running.cancelling):
        return WAIT
    job = queue.peek(now, GAP_SIZES, False)
    return WAIT if job is None else Decision(Action.LEND_GAP, running, job)


def at_first_figure(queue: JobQueue, run: Run) -> Decision:
    """A run has shown a partial figure (call before its readers count as answered): CUT_SHORT
    if it is a newcomer's first run (or figure_only) at its first figure and other readers'
    points or newcomers' first jobs wait (figure_only: whoever waits); else WAIT. Not for a
    newcomer who joined a run past its first figure: what it has done would be lost."""
    if run.figured or run.state.told or run.building:
        return WAIT
    firsts = any(not job.aside and queue.newcomer(job.session_id) for job in run.jobs)
    if not (firsts or run.figure_only):
        return WAIT
    waiting = queue.urgent(run.sessions)
    if not waiting and not run.figure_only:
        return WAIT
    why = (f"let {waiting} waiting points and first jobs through" if waiting else
           "keep the pause stack's last place for points")
    return Decision(Action.CUT_SHORT, run, why=why)


def measure_again(queue: JobQueue, run: Run, cacheable: bool,
                  settings: Settings = DEFAULT) -> bool:
    """True if a run's disturbed result is measured again: its kind is cached, it has been
    measured again fewer than `remeasures` times, and no other reader's job waits (a re-measure
    in front of readers with no number yet costs them two runs and the quiet waits)."""
    return (cacheable and run.lead.remeasures < settings.remeasures
            and not queue.others_waiting(run.sessions))


def after_pause(state: RunState) -> RunState:
    """The state a run resumed from the pause stack goes on in."""
    return RunState.CANCELLING if state is RunState.CANCELLING else RunState.RUNNING
