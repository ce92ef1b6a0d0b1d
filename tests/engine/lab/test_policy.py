"""The classroom scheduler's rules (engine.lab.policy) as tables: each row a scene (what runs,
what is paused, what waits and for how long) and the decision the rule gives. Pure: no worker, no
clock, no threads; every row runs in well under a millisecond.

Conventions of the rows: a reader named "new..." has nothing on screen yet (a newcomer); every
other reader has a number. Times are seconds before NOW. Sizes: a point, a run (a schedule run:
pausable, an early figure), a load test (pausable, an early figure), and "kv" (the KV cache
lesson's run: pausable, no early figure).
"""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest

from engine.lab import policy
from engine.lab.events import Job
from engine.lab.job_queue import JobQueue
from engine.lab.policy import Action
from engine.lab.runs import Run, RunState
from engine.lab.settings import DEFAULT

NOW = 1000.0
S = DEFAULT
_ids = itertools.count(1)
ANSWERED = {"a", "b", "me", "lt", *(f"paused{i}" for i in range(8))}  # readers with a number
KINDS = {"point": ("sweep_point", "point", False, False),
         "run": ("serve_run", "run", True, True),
         "load": ("load_test", "load", True, True),
         "kv": ("block_snapshots", "run", True, False),
         "fixed": ("endpoint_load_test", "load", False, False)}  # a load test never paused


def job(what: str, reader: str, waited: float = 0.0, **fields) -> Job:
    """A queued job of `what` (KINDS) asked `waited` seconds before NOW by `reader`."""
    kind, size, pausable, figures = KINDS[what]
    return Job(next(_ids), kind, {"n": next(_ids)}, session_id=reader, size=size,
               pausable=pausable, figures=figures, use_cache=False,
               submitted_at=NOW - waited, **fields)


def context(reader: str, waited: float = 0.0) -> Job:
    """A point asked in the background: context for another point of its reader's (the knob's
    batch 1 and half its batch beside the slider's)."""
    return job("point", reader, waited, background=True)


def run(what: str, reader: str, ran: float = 10.0, state: RunState = RunState.RUNNING,
        remeasured: bool = False, **fields) -> Run:
    """A run of `what` that started (or went on) `ran` seconds before NOW; `remeasured`: a
    re-measure (its readers were shown a disturbed result)."""
    lead = job(what, reader, waited=ran + 1)
    lead.state, lead.started_at = "running", NOW - ran
    if remeasured:
        lead.remeasures, lead.result = 1, {"check": {"disturbed": True}}
    return Run(lead.id, [lead], state=state, started_at=NOW - ran, **fields)


def stack(depth: int, paused_s: float = 5.0, what: str = "load") -> list[Run]:
    """`depth` runs paused inside each other's pauses, the innermost paused `paused_s` ago."""
    runs = [run(what, f"paused{i}", state=RunState.PAUSED) for i in range(depth)]
    for r in runs:
        r.paused_at = NOW - paused_s
    return runs


def queue_of(*jobs: Job) -> JobQueue:
    q = JobQueue()
    for j in jobs:
        q.add(j)
    for reader in {j.session_id for j in jobs} | ANSWERED:
        if reader is not None and not reader.startswith("new"):
            q.answered(reader)
    return q


def who(decision) -> tuple:
    """A decision as (action, reader of the job it starts or of the run it acts on)."""
    target = decision.job if decision.job is not None else (
        decision.run.lead if decision.run is not None else None)
    return decision.action, (target.session_id if target is not None else None)


def decide(running=None, paused=(), queued=(), filling=None, settings=S):
    return policy.decide(queue_of(*queued), running, list(paused), filling, NOW, settings)


# ---- the worker is free: what starts ----------------------------------------------------------
START_ROWS = [
    ("nothing waits -> wait", [], (Action.WAIT, None)),
    ("one point waits -> start it", [job("point", "a")], (Action.START, "a")),
    ("a run and a younger point -> the point (short before long)",
     [job("run", "a", 5), job("point", "b", 0.1)], (Action.START, "b")),
    ("a load test and a run -> the run", [job("load", "a", 5), job("run", "b", 1)],
     (Action.START, "b")),
    ("a newcomer's load test and a point of 0.5 s -> the newcomer's (newcomers first)",
     [job("point", "b", 0.5), job("load", "new1", 0.2)], (Action.START, "new1")),
    ("a newcomer's load test and a point that has waited 2 s -> the overdue point",
     [job("load", "new1", 1.0), job("point", "b", 2.0)], (Action.START, "b")),
    ("a newcomer's run that has waited 3 s and an overdue point -> the newcomer's",
     [job("point", "b", 2.5), job("run", "new1", 3.0)], (Action.START, "new1")),
    ("two newcomers -> the first to arrive", [job("run", "new2", 1), job("load", "new1", 2)],
     (Action.START, "new1")),
    ("a newcomer's later point waits behind their first job",
     [job("kv", "new1", 1.0), job("point", "new1", 0.9)], (Action.START, "new1")),
    ("a load test that has waited 30 s and a younger run -> the aged load test",
     [job("run", "b", 1), job("load", "a", 30)], (Action.START, "a")),
    ("an aged load test and a point -> the point", [job("load", "a", 40), job("point", "b")],
     (Action.START, "b")),
    ("a load test that has waited 90 s and a reader's second point -> the load test (a point "
     "now, and it came first)",
     [job("load", "a", 90), job("point", "b", 0.5), job("point", "b", 0.4)],
     (Action.START, "b")),
    ("one reader's dozen points and another's one -> readers take turns",
     [job("point", "a", 1.0), job("point", "a", 0.9), job("point", "b", 0.1)],
     (Action.START, "a")),
    ("a context point that has waited 1.5 s and another reader's released point -> the "
     "released point", [context("a", 1.5), job("point", "b", 0.1)], (Action.START, "b")),
    ("a context point and a run -> the run (context waits behind runs)",
     [context("a", 5), job("run", "b", 1)], (Action.START, "b")),
    ("a context point and a load test -> the load test",
     [context("a", 5), job("load", "b", 1)], (Action.START, "b")),
    ("a context point that has waited 30 s and a younger run -> the context point (aged)",
     [context("a", 30), job("run", "b", 1)], (Action.START, "a")),
    ("a context point alone -> start it", [context("a", 0.1)], (Action.START, "a")),
]


@pytest.mark.parametrize("words, queued, expected", START_ROWS, ids=[r[0] for r in START_ROWS])
def test_a_free_worker_starts_what_the_queue_gives(words, queued, expected):
    assert who(decide(queued=queued)) == expected


def test_a_readers_released_point_is_their_first_point_though_their_context_came_first():
    """The knob's release to 40 after one to 20: the 20's context (10) still queued, the new
    point waited 2.5 s. The released point is the reader's first point, overdue, before another
    reader's first point that has waited less; the context point is nobody's first."""
    stale, released = context("a", 5), job("point", "a", 2.5)
    decision = decide(queued=[stale, released, job("point", "b", 1.0)])
    assert decision.action is Action.START and decision.job is released


def test_a_context_point_runs_in_a_gap():
    """An idle gap of a running load test is the place for context: lent, and sent."""
    q = queue_of(context("a", 0.5))
    running = run("load", "lt", 0.5)
    assert policy.lends_gaps(q, running, None)
    asked = policy.fill_gap(q, running, None, running.id, NOW)
    assert asked.action is Action.LEND_GAP and asked.job.background


# ---- inside a pause, and the pause stack ------------------------------------------------------
PAUSE_STACK_ROWS = [
    ("a paused load test, a run waits -> start the run (smaller)",
     stack(1), [job("run", "a")], (Action.START, "a")),
    ("a paused load test, another load test waits -> it goes on",
     stack(1), [job("load", "a")], (Action.RESUME, "paused0")),
    ("a paused schedule run, another run waits -> it goes on (never swapped for its like)",
     stack(1, what="run"), [job("run", "a")], (Action.RESUME, "paused0")),
    ("a paused schedule run, a newcomer's load test waits -> start it (a newcomer's first is "
     "any size)", stack(1, what="run"), [job("load", "new1")], (Action.START, "new1")),
    ("a paused load test, nothing waits -> it goes on", stack(1), [], (Action.RESUME, "paused0")),
    ("four paused, a newcomer's schedule run waits -> start it, to stop at its first figure",
     stack(4), [job("run", "new1")], (Action.START, "new1")),
    ("four paused, a newcomer's KV cache run (no early figure) waits -> start it, runs whole",
     stack(4), [job("kv", "new1")], (Action.START, "new1")),
    ("five paused (the last place taken), a newcomer's KV cache run and a point waits -> the "
     "point", stack(5), [job("kv", "new1", 0.5), job("point", "a", 1.2)], (Action.START, "a")),
    ("five paused, a newcomer's rate sweep waits, a point has waited 1.2 s -> the newcomer's "
     "(it stops at its first figure)",
     stack(5), [job("load", "new1", 0.5), job("point", "a", 1.2)], (Action.START, "new1")),
    ("five paused, a newcomer's KV cache run waits alone -> the innermost goes on",
     stack(5), [job("kv", "new1", 5)], (Action.RESUME, "paused4")),
    ("five paused, a reader's run waits -> the innermost goes on",
     stack(5), [job("run", "a", 5)], (Action.RESUME, "paused4")),
    ("five paused, a point has waited 1.2 s -> start the point in the last place",
     stack(5), [job("point", "a", 1.2)], (Action.START, "a")),
    ("a paused load test, only a context point waits -> it goes on (context holds nothing "
     "paused)", stack(1), [context("a", 5)], (Action.RESUME, "paused0")),
    ("five paused, only a context point waits -> the innermost goes on",
     stack(5), [context("a", 5)], (Action.RESUME, "paused4")),
]


@pytest.mark.parametrize("words, paused, queued, expected", PAUSE_STACK_ROWS,
                         ids=[r[0] for r in PAUSE_STACK_ROWS])
def test_inside_a_pause_only_smaller_jobs_start(words, paused, queued, expected):
    assert who(decide(paused=paused, queued=queued)) == expected


@pytest.mark.parametrize("depth", range(7))
@pytest.mark.parametrize("what", ["run", "kv", "load", "point"])
def test_a_newcomers_run_started_with_the_pause_stack_nearly_full_is_figure_only(depth, what):
    """Started with max_paused runs paused or more, a newcomer's first run that shows a figure
    soon is figure_only (it never takes the last place); below, or without an early figure, or
    a reader's with a number, not."""
    newcomer = decide(paused=stack(depth), queued=[job(what, "new1")])
    reader = decide(paused=stack(depth), queued=[job(what, "a")])
    soon = KINDS[what][3]
    if newcomer.action is Action.START:
        assert newcomer.figure_only == (depth >= S.max_paused and soon)
    else:  # past the last place only points and early-figure runs start
        assert depth > S.max_paused and not soon and what != "point"
    assert reader.action is not Action.START or not reader.figure_only


# ---- when a paused run goes on ----------------------------------------------------------------
RESUME_ROWS = [
    # paused for (s), what waits -> the innermost goes on?
    (5, [job("point", "a", 0.5)], False, "a point waits"),
    (11, [job("point", "a", 0.5)], False, "past max_pause_s, a point still waits"),
    (11, [job("run", "a", 0.5)], True, "past max_pause_s, only a run waits"),
    (5, [job("run", "a", 0.5)], False, "a run waits, inside max_pause_s: it starts"),
    (31, [job("point", "a", 0.5)], True, "past hard_pause_s, whatever waits"),
    (11, [job("run", "new1", 0.5)], False, "past max_pause_s, a newcomer's first job waits"),
    (11, [job("point", "paused0", 0.5)], True, "past max_pause_s, only its own reader's point"),
    (5, [job("point", "paused0", 0.5)], False, "its own reader's point inside max_pause_s"),
    (0, [], True, "nothing waits"),
    (5, [context("a", 0.5)], True, "only a context point waits"),
]


@pytest.mark.parametrize("paused_s, queued, goes_on, words", RESUME_ROWS,
                         ids=[r[3] for r in RESUME_ROWS])
def test_a_paused_load_test_goes_on_when_due(paused_s, queued, goes_on, words):
    decision = decide(paused=stack(1, paused_s), queued=queued)
    assert (decision.action is Action.RESUME) is goes_on
    if not goes_on:
        assert decision.action is Action.START


def test_a_paused_run_whose_readers_left_goes_on_at_once_to_stop():
    paused = stack(1, 0.1)
    paused[0].state = RunState.CANCELLING
    decision = decide(paused=paused, queued=[job("point", "a", 5)])
    assert who(decision) == (Action.RESUME, "paused0") and decision.why == "to stop"


@pytest.mark.parametrize("paused_s", [0, 5, 9.9, 10, 15, 29.9, 30, 60])
@pytest.mark.parametrize("waits", ["point", "run", "newcomer", "own point", "nothing"])
def test_resume_timing_grid(paused_s, waits):
    """The resume rule over a grid: goes on iff nothing it gives way to waits, or paused
    hard_pause_s, or paused max_pause_s and no other reader's point or newcomer's first waits."""
    queued = {"point": [job("point", "a", 0.1)], "run": [job("run", "a", 0.1)],
              "newcomer": [job("kv", "new1", 0.1)], "own point": [job("point", "paused0", 0.1)],
              "nothing": []}[waits]
    urgent = waits in ("point", "newcomer")
    goes_on = (waits == "nothing" or paused_s >= S.hard_pause_s
               or (paused_s >= S.max_pause_s and not urgent))
    assert (decide(paused=stack(1, paused_s), queued=queued).action is Action.RESUME) is goes_on


# ---- when the running run gives way ----------------------------------------------------------
RUNNING_ROWS = [
    ("a load test ran 5 s, a point has waited 1.2 s -> pause it",
     run("load", "lt", 5), [], [job("point", "a", 1.2)], (Action.PAUSE, "lt")),
    ("a load test ran 1 s (its turn not up), a point waits -> lend its gaps",
     run("load", "lt", 1), [], [job("point", "a", 1.2)], (Action.LEND_GAP, "lt")),
    ("a load test, a point of 0.5 s -> lend its gaps",
     run("load", "lt", 5), [], [job("point", "a", 0.5)], (Action.LEND_GAP, "lt")),
    ("a load test, only its own reader's point has waited -> lend its gaps, no pause",
     run("load", "lt", 5), [], [job("point", "lt", 5)], (Action.LEND_GAP, "lt")),
    ("a load test, another reader's run has waited 2 s -> wait (runs wait their turn)",
     run("load", "lt", 5), [], [job("run", "a", 2)], (Action.WAIT, None)),
    ("a load test, another reader's run has waited 90 s (a point now) -> pause it (smaller)",
     run("load", "lt", 5), [], [job("run", "a", 90)], (Action.PAUSE, "lt")),
    ("a schedule run, another reader's run has waited 90 s -> wait (not smaller)",
     run("run", "me", 5), [], [job("run", "a", 90)], (Action.WAIT, None)),
    ("a load test, another load test has waited 5 s -> wait",
     run("load", "lt", 5), [], [job("load", "a", 5)], (Action.WAIT, None)),
    ("a schedule run, another run has waited 5 s -> wait (not smaller)",
     run("run", "me", 5), [], [job("run", "a", 5)], (Action.WAIT, None)),
    ("a schedule run, a point has waited 1.2 s -> pause it",
     run("run", "me", 5), [], [job("point", "a", 1.2)], (Action.PAUSE, "me")),
    ("a point runs, another has waited 5 s -> lend (a point is never paused)",
     run("point", "me", 5), [], [job("point", "a", 5)], (Action.LEND_GAP, "me")),
    ("a load test ran 5 s, a context point has waited 5 s -> lend its gaps, no pause",
     run("load", "lt", 5), [], [context("a", 5)], (Action.LEND_GAP, "lt")),
    ("a schedule run, a context point has waited 90 s (a point now) -> pause it",
     run("run", "me", 5), [], [context("a", 90)], (Action.PAUSE, "me")),
    ("a load test nothing may pause, a point waits 5 s -> lend",
     run("fixed", "me", 5), [], [job("point", "a", 5)], (Action.LEND_GAP, "me")),
    ("a load test, a newcomer's first (a load test) has waited 1.2 s -> pause it",
     run("load", "lt", 5), [], [job("load", "new1", 1.2)], (Action.PAUSE, "lt")),
    ("one paused, a schedule run inside, a newcomer's load test waited 1.2 s -> pause it",
     run("run", "me", 5), stack(1), [job("load", "new1", 1.2)], (Action.PAUSE, "me")),
    ("one paused, a schedule run inside, a reader's run waited 5 s -> wait (points only)",
     run("run", "me", 5), stack(1), [job("run", "a", 5)], (Action.WAIT, None)),
    ("four paused, a schedule run inside, a newcomer's load test waited 5 s -> wait (the last "
     "place is for points)", run("run", "me", 5), stack(4), [job("load", "new1", 5)],
     (Action.WAIT, None)),
    ("four paused, a schedule run inside, a point waited 1.2 s -> pause it into the last place",
     run("run", "me", 5), stack(4), [job("point", "a", 1.2)], (Action.PAUSE, "me")),
    ("five paused, a schedule run in the last place, a point waited 5 s -> lend, never pause",
     run("run", "me", 5), stack(5), [job("point", "a", 5)], (Action.LEND_GAP, "me")),
    ("a figure-only run, a point waited 5 s -> lend (it stops at its figure)",
     run("run", "new1", 5, figure_only=True), [], [job("point", "a", 5)],
     (Action.LEND_GAP, "new1")),
    ("a run building its engine, a point waited 1.2 s -> stop the build",
     run("point", "me", 5, RunState.BUILDING), [], [job("point", "a", 1.2)],
     (Action.STOP_BUILD, "me")),
    ("a build, a run waited 1.2 s -> wait", run("load", "me", 5, RunState.BUILDING), [],
     [job("run", "a", 1.2)], (Action.WAIT, None)),
    ("a build, a run waited 90 s -> stop the build",
     run("load", "me", 5, RunState.BUILDING), [], [job("run", "a", 90)],
     (Action.STOP_BUILD, "me")),
    ("a build, a newcomer's load test waited 1.2 s -> stop the build",
     run("load", "me", 5, RunState.BUILDING), [], [job("load", "new1", 1.2)],
     (Action.STOP_BUILD, "me")),
    ("a build, a load test waited 90 s -> wait (a build gives way to points and runs)",
     run("point", "me", 5, RunState.BUILDING), [], [job("load", "a", 90)],
     (Action.WAIT, None)),
    ("a build, a load test waited 5 s -> wait",
     run("point", "me", 5, RunState.BUILDING), [], [job("load", "a", 5)], (Action.WAIT, None)),
    ("a build in the last place, a newcomer's run waited 5 s -> stop the build",
     run("point", "me", 5, RunState.BUILDING), stack(5), [job("kv", "new1", 5)],
     (Action.STOP_BUILD, "me")),
    ("a run being paused, a point waits -> lend", run("load", "lt", 5, RunState.PAUSING), [],
     [job("point", "a", 5)], (Action.LEND_GAP, "lt")),
    ("a run being cancelled, a point waits -> wait",
     run("load", "lt", 5, RunState.CANCELLING), [], [job("point", "a", 5)],
     (Action.WAIT, None)),
    ("a run being cut short, a point waits -> lend",
     run("load", "lt", 5, RunState.CUTTING_SHORT), [], [job("point", "a", 5)],
     (Action.LEND_GAP, "lt")),
    ("a re-measure, another reader's run waits -> give way",
     run("point", "me", 1, remeasured=True), [], [job("run", "a", 0.1)],
     (Action.GIVE_WAY, "me")),
    ("a re-measure, its own reader's point waits -> lend",
     run("point", "me", 1, remeasured=True), [], [job("point", "me", 0.1)],
     (Action.LEND_GAP, "me")),
    ("a first measurement, another reader's run waits -> wait",
     run("point", "me", 1), [], [job("run", "a", 0.1)], (Action.WAIT, None)),
    ("a re-measure giving way already, a point waits -> lend",
     run("point", "me", 1, RunState.GIVING_WAY, remeasured=True), [],
     [job("point", "a", 0.1)], (Action.LEND_GAP, "me")),
]


@pytest.mark.parametrize("words, running, paused, queued, expected", RUNNING_ROWS,
                         ids=[r[0] for r in RUNNING_ROWS])
def test_the_running_run_gives_way_by_the_rules(words, running, paused, queued, expected):
    assert who(decide(running=running, paused=paused, queued=queued)) == expected


@pytest.mark.parametrize("ran", [0, 1.0, 1.99, 2.0, 3, 60])
@pytest.mark.parametrize("waited", [0, 0.5, 0.99, 1.0, 1.5, 10])
@pytest.mark.parametrize("what", ["run", "load", "kv"])
def test_a_long_run_is_paused_after_its_turn_for_a_point_that_waited(ran, waited, what):
    """The pause rule over a grid: a pausable run is paused iff it has had turn_s and another
    reader's point has waited preempt_after_s; otherwise its gaps are lent to the point."""
    decision = decide(running=run(what, "me", ran), queued=[job("point", "a", waited)])
    due = ran >= S.turn_s and waited >= S.preempt_after_s
    assert decision.action is (Action.PAUSE if due else Action.LEND_GAP)


@pytest.mark.parametrize("preempt_after_s", [0.5, 1.0, 3.0])
@pytest.mark.parametrize("turn_s", [0.0, 2.0, 5.0])
def test_the_pause_rule_follows_its_settings(preempt_after_s, turn_s):
    settings = replace(S, preempt_after_s=preempt_after_s, turn_s=turn_s, lend_gaps=False)
    for ran, waited in itertools.product([0, 1, 2, 4, 6], [0, 0.6, 1.1, 3.1]):
        decision = decide(running=run("load", "me", ran), queued=[job("point", "a", waited)],
                          settings=settings)
        due = ran >= turn_s and waited >= preempt_after_s
        assert decision.action is (Action.PAUSE if due else Action.WAIT), (ran, waited)


# ---- a run's first figure --------------------------------------------------------------------
FIGURE_ROWS = [
    ("a newcomer's load test, another reader's point waits -> cut short",
     run("load", "new1"), [job("point", "a", 0.1)], Action.CUT_SHORT),
    ("a newcomer's load test, nobody waits -> runs on", run("load", "new1"), [], Action.WAIT),
    ("a newcomer's load test, another newcomer's first job waits -> cut short",
     run("load", "new1"), [job("kv", "new2", 0.1)], Action.CUT_SHORT),
    ("a newcomer's load test, another reader's run waits -> runs on",
     run("load", "new1"), [job("run", "a", 0.1)], Action.WAIT),
    ("a newcomer's load test, only their own point waits -> runs on",
     run("load", "new1"), [job("point", "new1", 0.1)], Action.WAIT),
    ("a reader with a number, a point waits -> runs on",
     run("load", "a"), [job("point", "b", 0.1)], Action.WAIT),
    ("a figure-only run, nobody waits -> cut short",
     run("run", "a", figure_only=True), [], Action.CUT_SHORT),
    ("a newcomer's run past its first figure, a point waits -> runs on",
     run("load", "new1", figured=True), [job("point", "a", 0.1)], Action.WAIT),
    ("a newcomer's run being paused, a point waits -> runs on",
     run("load", "new1", state=RunState.PAUSING), [job("point", "a", 0.1)], Action.WAIT),
    ("a newcomer's run still building, a point waits -> runs on",
     run("load", "new1", state=RunState.BUILDING), [job("point", "a", 0.1)], Action.WAIT),
    ("a newcomer's load test, only another reader's context point waits -> runs on",
     run("load", "new1"), [context("a", 0.1)], Action.WAIT),
]


@pytest.mark.parametrize("words, running, queued, expected", FIGURE_ROWS,
                         ids=[r[0] for r in FIGURE_ROWS])
def test_a_newcomers_run_is_cut_short_at_its_first_figure(words, running, queued, expected):
    assert policy.at_first_figure(queue_of(*queued), running).action is expected


def test_a_lookup_aside_does_not_make_a_run_a_newcomers_first():
    r = run("load", "new1")
    r.lead.aside = True
    assert policy.at_first_figure(queue_of(job("point", "a")), r).action is Action.WAIT


# ---- lending a gap ---------------------------------------------------------------------------
@pytest.mark.parametrize("lend", [True, False])
@pytest.mark.parametrize("waits", ["point", "newcomer's point", "run", "newcomer's run", "none"])
@pytest.mark.parametrize("filling", [False, True])
@pytest.mark.parametrize("state", [RunState.RUNNING, RunState.CANCELLING, RunState.PAUSING])
def test_idle_gaps_are_lent_one_at_a_time_while_a_point_waits(lend, waits, filling, state):
    queued = {"point": [job("point", "a")], "newcomer's point": [job("point", "new1")],
              "run": [job("run", "a")], "newcomer's run": [job("run", "new1")],
              "none": []}[waits]
    running = run("load", "lt", 0.5, state)
    gap = run("point", "b", 0.1) if filling else None
    q = queue_of(*queued)
    expected = (lend and "point" in waits and not filling and state is not RunState.CANCELLING)
    assert policy.lends_gaps(q, running, gap, replace(S, lend_gaps=lend)) is expected
    asked = policy.fill_gap(q, running, gap, running.id, NOW)
    if state is RunState.CANCELLING or filling or "point" not in waits:
        assert asked.action is Action.WAIT
    else:  # asked for one, a point is sent (even with lending off: it asked while it was on)
        assert asked.action is Action.LEND_GAP and asked.job is queued[0]
    assert policy.fill_gap(q, running, gap, running.id + 1, NOW).action is Action.WAIT


# ---- measuring a disturbed result again ------------------------------------------------------
@pytest.mark.parametrize("cacheable", [True, False])
@pytest.mark.parametrize("times", [0, 1, 2, 3])
@pytest.mark.parametrize("waits", ["nobody", "its own reader", "another reader"])
def test_a_disturbed_result_is_measured_again_only_while_nobody_else_waits(cacheable, times,
                                                                           waits):
    r = run("point", "me")
    r.lead.remeasures = times
    queued = {"nobody": [], "its own reader": [job("point", "me")],
              "another reader": [job("point", "a")]}[waits]
    expected = cacheable and times < S.remeasures and waits != "another reader"
    assert policy.measure_again(queue_of(*queued), r, cacheable) is expected


def test_the_settings_bound_the_remeasures():
    r = run("point", "me")
    assert not policy.measure_again(queue_of(), r, True, replace(S, remeasures=0))
