"""The classroom's queue policy (engine.lab.job_queue), on its own: a newcomer's first job before
everything, points before runs before load tests, readers in turn, a reader's newest request of a
demo replacing the queued ones, one run for jobs asking the same question, and ageing so that a
load test is never starved."""

from __future__ import annotations

import itertools

from engine.lab.events import Job
from engine.lab.job_queue import (
    AGE_S,
    AGED,
    FIRST_POINT,
    NEWCOMER,
    NEWCOMER_DUE_S,
    OVERDUE,
    OVERDUE_S,
    STARVE_S,
    JobQueue,
    Rank,
    question,
)
from engine.lab.registry import JOBS, get_spec, normalize

_ids = itertools.count(1)


def job(kind: str = "sweep_point", session: str | None = "a", at: float = 0.0,
        demo: str | None = None, use_cache: bool = True, aside: bool = False,
        background: bool = False, **params) -> Job:
    """A job as the service makes it (normalized params, the kind's size and question)."""
    params = normalize(kind, params)
    spec = get_spec(kind)
    return Job(next(_ids), kind, params, session_id=session, use_cache=use_cache and
               spec.cacheable, demo=demo, size=spec.size, submitted_at=at,
               question=question(kind, params) if spec.cacheable else None, aside=aside,
               background=background)


def ids(jobs) -> list[int]:
    return [j.id for j in jobs]


def with_numbers(queue: JobQueue, *sessions: str) -> JobQueue:
    """These readers have had a result already: no newcomers (rule 0), so the size rules
    order their jobs."""
    for session in sessions:
        queue.answered(session)
    return queue


def drain(queue: JobQueue, now: float = 1.0) -> list[list[Job]]:
    runs = []
    while queue:
        runs.append(queue.take(now))
    return runs


def test_every_kind_declares_a_size_and_a_bound():
    for spec in JOBS.values():
        assert spec.size in ("point", "run", "load"), spec.kind
        if spec.kind == "setup":  # the app's own first start: no lesson waits on it, it pauses
            assert not spec.bounds and spec.pausable
            continue
        if spec.kind == "class_run":  # the class run lasts as long as the teacher keeps it
            assert not spec.bounds and not spec.pausable and not spec.cacheable
            continue
        assert spec.bounds and all(b.seconds > 0 for b in spec.bounds), spec.kind
        for bound in spec.bounds:
            spec.check(bound.at)  # every bound is stated at params the kind accepts
    assert get_spec("sweep_point").size == "point"
    assert get_spec("load_test").size == "load"


def test_one_reader_alone_is_served_in_order_of_asking():
    q = JobQueue()
    jobs = [job(session="a", at=i, batch_size=b) for i, b in enumerate((1, 2, 3))]
    for j in jobs:
        q.add(j)
    assert [ids(r) for r in drain(q)] == [[j.id] for j in jobs]


def test_readers_take_turns_so_one_readers_five_jobs_do_not_block_the_next():
    q = JobQueue()
    many = [job(session="a", at=i / 10, batch_size=b) for i, b in enumerate((1, 2, 3, 4, 5))]
    late = job(session="b", at=1.0, batch_size=9)
    for j in [*many, late]:
        q.add(j)
    first = q.take(1.1)  # both unserved: the one who has waited longest goes first
    assert ids(first) == [many[0].id]
    assert q.position(late, 1.1) == 0  # and then the other reader, not a's second job
    assert ids(q.take(1.1)) == [late.id]
    assert [ids(r) for r in drain(q)] == [[j.id] for j in many[1:]]


def test_a_reader_who_just_arrived_goes_before_readers_already_served():
    q = JobQueue()
    for i in range(3):
        q.add(job(session=f"s{i}", at=i / 10, batch_size=1 + i))
        q.add(job(session=f"s{i}", at=i / 10, batch_size=10 + i))
    for _ in range(3):
        q.take(0.5)  # each of the three readers has had a job run
    newcomer = job(session="new", at=0.6, batch_size=40)
    q.add(newcomer)
    assert q.order(0.7)[0] is newcomer
    assert ids(q.take(0.7)) == [newcomer.id]


def test_points_run_before_schedule_runs_and_load_tests():
    q = with_numbers(JobQueue(), "a", "b", "c")
    load = job("load_test", session="a", at=0)
    run = job("serve_run", session="b", at=1)
    point = job(session="c", at=2)
    for j in (load, run, point):
        q.add(j)
    assert [r[0] for r in drain(q, now=3)] == [point, run, load]


def test_a_load_test_that_has_waited_long_enough_is_not_starved():
    """Aged (AGE_S), a load test goes behind the points but before younger runs; a slider's
    fresh point does not wait for it. Waited STARVE_S, it is a point like the others."""
    q = with_numbers(JobQueue(), "a", "r", *(f"p{i}" for i in range(5)))
    load = job("load_test", session="a", at=0)
    q.add(load)
    for i in range(5):
        q.add(job(session=f"p{i}", at=AGE_S - 1, batch_size=1 + i))
    run = job("serve_run", session="r", at=AGE_S - 1)
    q.add(run)
    assert q.order(AGE_S - 0.5)[-1] is load  # young: behind every point and the run
    assert q.rank(load, AGE_S) == AGED
    assert q.order(AGE_S)[-2:] == [load, run]  # aged: behind the points, before the run
    assert q.order(STARVE_S - 1)[-2:] == [load, run]  # the run has aged too: still in arrival
    # starving: a point like the others (the points, overdue by now, go first: rule 0)
    assert q.rank(load, STARVE_S) == Rank.POINT and q.order(STARVE_S)[-2:] == [load, run]


def test_fresh_points_go_before_many_aged_jobs_of_readers_served_less_recently():
    """A class's backlog: thirty aged schedule runs and load tests of readers not served for a
    while, and a knob reader who was served a moment ago releases the slider. Their point goes
    first: aged jobs do not join the points' turn (docs/decisions/classroom-queue.md)."""
    q = with_numbers(JobQueue(), "knob", *(f"r{i}" for i in range(30)))
    backlog = [job("serve_run" if i % 2 else "load_test", session=f"r{i}", at=i / 10, seed=i)
               for i in range(30)]
    for j in backlog:
        q.add(j)
    q.add(job(session="knob", at=AGE_S + 5, batch_size=2))
    q.take(AGE_S + 5, sizes=("point",))  # the knob reader was served just now
    point = job(session="knob", at=AGE_S + 10, batch_size=3)
    q.add(point)
    now = AGE_S + 10.5
    assert all(q.rank(j, now) == AGED for j in backlog)
    assert q.order(now)[0] is point and q.position(point, now) == 0
    assert q.take(now) == [point]


def test_the_same_question_from_several_readers_runs_once():
    q = JobQueue()
    a = job(session="a", at=0, batch_size=8)
    b = job(session="b", at=1, batch_size=8)
    other = job(session="c", at=2, batch_size=16)
    c = job(session="c", at=3, batch_size=8)
    for j in (a, b, other, c):
        q.add(j)
    assert ids(q.order(4)) == [a.id, other.id]  # b and c ride on a's run
    assert q.position(c, 4) == 0
    assert ids(q.take(4)) == [a.id, b.id, c.id]
    assert ids(q.take(4)) == [other.id]


def test_uncacheable_or_fresh_jobs_never_ride_on_another_run():
    q = JobQueue()
    g1 = job("generate", session="a", at=0, prompt="hi")
    g2 = job("generate", session="b", at=1, prompt="hi")
    lead = job(session="a", at=2, batch_size=4)
    fresh = job(session="b", at=3, batch_size=4, use_cache=False)  # "measure again"
    for j in (g1, g2, lead, fresh):
        q.add(j)
    assert all(len(r) == 1 for r in drain(q))


def test_a_fresh_measurement_answers_readers_content_with_any_result():
    q = JobQueue()
    fresh = job(session="a", at=0, batch_size=4, use_cache=False)
    rider = job(session="b", at=1, batch_size=4)
    q.add(fresh)
    q.add(rider)
    assert ids(q.take(2)) == [fresh.id, rider.id]


def test_the_newest_request_of_a_demo_replaces_the_readers_queued_ones():
    q = JobQueue()
    old = [job(session="a", demo="knob", at=i, batch_size=b) for i, b in enumerate((2, 4))]
    other_demo = job(session="a", demo="lanes", at=2)
    other_reader = job(session="b", demo="knob", at=3, batch_size=2)
    for j in (*old, other_demo, other_reader):
        q.add(j)
    assert q.replace("a", "knob") == old
    assert q.replace("a", None) == []  # no demo: nothing is replaced
    assert set(ids(q)) == {other_demo.id, other_reader.id}


def test_removed_jobs_leave_and_a_departed_reader_is_forgotten():
    q = JobQueue()
    a, b = job(session="a", at=0), job(session="b", at=1, batch_size=2)
    q.add(a)
    q.add(b)
    assert q.remove(a) and not q.remove(a)
    assert ids(q.take(2)) == [b.id]
    q.forget("b")
    assert q._served == {}


def test_a_point_of_a_bigger_preset_queues_as_a_run_on_a_cpu():
    spec = get_spec("sweep_point")
    assert spec.size_for(normalize("sweep_point", {}), "cpu: Test (2 cores)") == "point"
    small = normalize("sweep_point", {"preset": "small", "batch_size": 32})  # the roofline's
    assert spec.size_for(small, "cpu: Test (2 cores)") == "run"
    assert spec.size_for(small, "cuda:0 NVIDIA H100") == "point"
    assert get_spec("load_test").size_for(normalize("load_test", {}), "cpu") == "load"


def test_a_knob_point_of_mini_queues_as_a_point_and_a_big_one_as_a_run():
    spec = get_spec("sweep_point")
    (knob,) = [b.at for b in spec.bounds if b.at["preset"] == "mini"]
    assert spec.size_for(normalize("sweep_point", knob), "cpu") == "point"
    batched = {**knob, "shared_prompt": False, "prompt_len": 512}  # 32k prompt tokens to prefill
    assert spec.size_for(normalize("sweep_point", batched), "cpu") == "run"
    roofline = {"preset": "mini", "batch_size": 32, "prompt_len": 128, "new_tokens": 32}
    assert spec.size_for(normalize("sweep_point", roofline), "cpu") == "run"
    prefill = normalize("prefill_point", {"preset": "mini", "prompt_len": 1024})
    assert get_spec("prefill_point").size_for(prefill, "cpu") == "run"


def test_longest_wait_counts_the_jobs_of_a_rank_or_smaller():
    q = with_numbers(JobQueue(), "a", "b")
    q.add(job("load_test", session="a", at=0))
    assert q.longest_wait(5) == 0  # no point waits: nothing to stop a load test for
    q.add(job(session="b", at=3))
    assert q.longest_wait(5) == 2 and q.longest_wait(5, rank=Rank.LOAD) == 5


def test_while_a_load_test_is_paused_only_shorter_jobs_are_taken():
    """An aged load test counts as a point in the order, but inside another load test's pause
    (engine.lab.policy) only points and runs are taken, and only they count as waiting."""
    q = with_numbers(JobQueue(), "a", "b")
    load = job("load_test", session="a", at=0)
    run = job("serve_run", session="b", at=AGE_S)
    q.add(load)
    q.add(run)
    now = AGE_S + 1
    assert q.order(now)[0] is load
    assert q.longest_wait(now, sizes=("point", "run")) == 0  # the run is young: Rank.RUN
    assert q.waiting(("point", "run")) == 1 and q.waiting(("load",)) == 1
    assert q.take(now, sizes=("point", "run")) == [run]
    assert q.take(now, sizes=("point", "run")) == [] and q.take(now) == [load]


def test_others_waiting_counts_only_other_readers_jobs():
    """What a re-measure would hold up (engine.lab.policy): a reader's own queued points do not
    count, every other reader's jobs do."""
    q = JobQueue()
    for j in [job(session="a", batch_size=2), job(session="a", batch_size=3),
              job(session="b", batch_size=4), job(session=None, batch_size=5)]:
        q.add(j)
    assert q.others_waiting(["a"]) == 2
    assert q.others_waiting(["a", "b"]) == 1
    assert q.others_waiting(["a", "b", None]) == 0
    assert JobQueue().others_waiting(["a"]) == 0


def test_a_newcomers_first_job_goes_before_aged_jobs_whatever_its_size():
    """Rule 0: a reader with no result yet gets their first job run before everything, even a
    load test before points that aged into rank 0 (under the size rule alone it waited behind
    all of them: in a class of 30, two minutes); it counts as waiting inside another run's
    pause, and is taken there whatever its size. Once answered, the reader is no newcomer."""
    q = with_numbers(JobQueue(), "a", "b")
    old = [job("serve_run", session=s, at=0, seed=b) for s, b in (("a", 2), ("b", 3))]
    load = job("load_test", session="c", at=AGE_S)  # the newcomer's first job
    later = job(session="c", at=AGE_S + 4, batch_size=4)  # and their second
    for j in (*old, load, later):
        q.add(j)
    now = AGE_S + 5  # the old runs have aged; the load test is young (rank 2 by size)
    assert q.order(now) == [load, later, *old]
    assert q.longest_wait(now, sizes=("point",), besides=["a", "b"]) == 5  # it waits: pause
    assert q.waiting(("point", "run")) == 4  # the load test counts as any size
    assert q.take(now, sizes=("point", "run")) == [load]  # taken inside a pause too
    q.answered("c")
    assert q.order(now) == [later, *old]  # now a reader like the others
    anonymous = job("load_test", session=None, at=AGE_S + 2)  # a script: never a newcomer
    q.add(anonymous)
    assert q.order(now)[-1] is anonymous
    q.forget("c")  # left: nothing of theirs is kept
    assert "c" not in q._answered and "c" not in q._served


def test_a_job_asked_aside_is_never_a_newcomers_first_and_hides_nothing():
    """A page's lookup beside its measurements (the GPU box's machine description, submitted
    aside) is not what the reader waits for: it gets no newcomer's rank, and the reader's first
    real job behind it keeps its own (before, the cached lookup's answer ended the newcomer's
    rank and the knob reader's first point waited with everyone's: p95 46 s)."""
    q = with_numbers(JobQueue(), "old")
    old = job(session="old", at=1, batch_size=2)
    info = job("info", session="new", at=1, aside=True)
    first = job("serve_run", session="new", at=2)
    for j in (old, info, first):
        q.add(j)
    assert q.rank(info, 2.5) == Rank.POINT and q.rank(first, 2.5) == NEWCOMER
    assert q.order(2.5) == [first, old, info]  # a newcomer's first job, then a reader's point


def test_a_point_asked_in_the_background_waits_behind_runs_and_ages_as_they_do():
    """The knob's context points (batch 1, half the batch): behind every run and load test,
    AGED after age_s, a point after starve_s; never a reader's first point nor a newcomer's
    first job, and never counted as waiting by the rules that move running work."""
    q = with_numbers(JobQueue(), "a", "b")
    ctx = job(session="a", at=0, batch_size=1, background=True)
    released = job(session="a", at=1, batch_size=40)
    load = job("load_test", session="b", at=1)
    newcomer_ctx = job(session="new", at=0, batch_size=2, background=True)
    for j in (ctx, released, load, newcomer_ctx):
        q.add(j)
    assert q.rank(ctx, 2) == Rank.BACKGROUND and q.rank(released, 2) == Rank.FIRST_POINT
    assert q.rank(newcomer_ctx, 2) == Rank.BACKGROUND  # not the newcomer's first job
    assert q.order(2) == [released, load, newcomer_ctx, ctx]  # (turns: rule 2)
    assert q.rank(ctx, AGE_S) == Rank.AGED and q.rank(ctx, STARVE_S) == Rank.POINT
    assert q.waiting(("point",)) == 1 and q.waiting(("point",), background=True) == 3
    assert q.urgent() == 1
    assert q.longest_wait(10, sizes=("point",)) == 9  # the released point's wait, not ctx's


def test_a_readers_first_job_loses_its_newcomers_rank_once_a_number_is_on_their_page():
    """Once a reader has a number (a nearby cached result, a run's partial figure: the service
    calls answered), the queue prefers the readers who have nothing on screen."""
    q = with_numbers(JobQueue(), "old")
    shown = job("load_test", session="shown", at=0, seed=1)
    bare = job("load_test", session="bare", at=1, seed=2)
    run = job("serve_run", session="old", at=2, seed=4)
    for j in (shown, bare, run):
        q.add(j)
    assert q.order(3) == [shown, bare, run]
    q.answered("shown")  # a nearby result is on that reader's page
    assert q.order(3) == [bare, run, shown]


def test_ordering_a_long_queue_takes_linear_time_in_newcomer_checks(monkeypatch):
    """Each newcomer's first job is found once per order, not once per job (it was a scan of
    the queue for every job: quadratic in a class's 60-job backlog)."""
    q = JobQueue()
    for i in range(200):
        q.add(job(session=f"s{i % 50}", at=i, batch_size=1 + i))
    calls = []
    real = JobQueue._firsts
    monkeypatch.setattr(JobQueue, "_firsts", lambda self: calls.append(1) or real(self))
    order = q.order(300)
    assert len(order) == 200 and len(calls) == 1
    firsts = real(q)
    assert order[:50] == [firsts[0][f"s{i}"] for i in range(50)]


def test_newcomers_first_jobs_go_before_a_readers_first_point_until_it_is_overdue():
    """A reader's first queued point goes behind the newcomers' first jobs (a newcomer's run
    holds the engine only until its first figure: engine.lab.client cuts it short there) and
    before everything else: only the reader's first queued point, so a reader's dozen points
    still take turns with everyone. Once it has waited OVERDUE_S it goes before the
    newcomers' first jobs too, a newcomer's first point among them."""
    q = with_numbers(JobQueue(), "knob", "roof")
    knob = job(session="knob", at=0, batch_size=12)
    dozen = [job(session="roof", at=0, batch_size=b) for b in (1, 2, 3)]
    runs = [job("serve_run", session=f"new{i}", at=1 + i / 10, seed=i) for i in range(5)]
    for j in (knob, *dozen, *runs):
        q.add(j)
    young = 1.9
    assert q.rank(knob, young) == q.rank(dozen[0], young) == FIRST_POINT
    assert q.rank(dozen[1], young) == Rank.POINT and q.rank(runs[0], young) == NEWCOMER
    assert q.order(young) == [*runs, knob, dozen[0], *dozen[1:]]
    now = OVERDUE_S
    assert q.rank(knob, now) == q.rank(dozen[0], now) == OVERDUE
    assert q.rank(dozen[1], now) == Rank.POINT
    arrived = job(session="new-knob", at=now - 0.5, batch_size=5)  # a newcomer's first point
    q.add(arrived)
    assert q.rank(arrived, now) == NEWCOMER
    assert q.order(now) == [knob, dozen[0], *runs, arrived, *dozen[1:]]


def test_a_newcomers_first_job_that_has_waited_goes_before_overdue_points():
    """In a class's arrival points keep coming, each overdue after OVERDUE_S. Once it has
    waited NEWCOMER_DUE_S a newcomer's first job goes before them (a run holds the engine only
    until its first figure); younger, it waits behind them."""
    q = with_numbers(JobQueue(), "knob", "roof")
    points = [job(session=s, at=0, batch_size=b) for s, b in (("knob", 12), ("roof", 3))]
    load = job("load_test", session="new", at=1)
    for j in (*points, load):
        q.add(j)
    now = 1 + NEWCOMER_DUE_S - 0.1
    assert q.rank(load, now) == NEWCOMER and q.order(now) == [*points, load]
    now = 1 + NEWCOMER_DUE_S
    assert q.rank(load, now) == q.rank(points[0], now) == OVERDUE
    assert q.order(now) == [load, *points]
    assert q.take(now) == [load]


def test_newcomers_first_jobs_can_be_left_out_where_only_points_may_start():
    """With the service's pause stack full (engine.lab.client._may_start) a newcomer's long
    first job must not start: nothing could pause it for the points behind it. take, waiting
    and longest_wait then count points only; a newcomer's first point is still taken first."""
    q = with_numbers(JobQueue(), "old")
    load = job("load_test", session="new", at=0)
    point = job(session="old", at=2.5, batch_size=3)  # not overdue yet at 4
    first_point = job(session="fresh", at=3, batch_size=5)
    for j in (load, point):
        q.add(j)
    now = 4.0
    assert q.waiting(("point",)) == 2 and q.waiting(("point",), newcomers=False) == 1
    assert q.longest_wait(now, sizes=("point",)) == 4
    assert q.longest_wait(now, sizes=("point",), newcomers=False) == 1.5
    assert q.take(now, ("point",)) == [load]  # a newcomer's first, any size, then
    assert q.take(now, ("point",)) == [point]  # a reader's first point
    q.add(load)
    q.add(first_point)
    assert q.take(now, ("point",), newcomers=False) == [first_point]
    assert q.take(now, ("point",), newcomers=False) == [] and q.take(now) == [load]


def test_what_a_newcomers_run_is_cut_short_for_points_and_newcomers_first_jobs_of_others():
    """JobQueue.urgent counts what engine.lab.client cuts a newcomer's run short for once its
    first figure shows: other readers' points and newcomers' first jobs, not runs or load
    tests of readers who have a number, nor the run's own readers' jobs."""
    q = JobQueue()
    q.answered("old")
    q.add(job("load_test", session="old", at=0.0))  # a reader with a number: waits its turn
    q.add(job("serve_run", session="mine", at=0.0))  # the running run's reader: theirs wait
    assert q.urgent(besides=["mine"]) == 0
    assert q.newcomer("new") and not q.newcomer("old") and not q.newcomer(None)
    q.add(job("load_test", session="new", at=1.0))  # a newcomer's first job
    q.add(job("load_test", session="new", at=1.0, seed=2))  # ... their second: not urgent
    q.add(job("sweep_point", session="old", at=2.0))  # a point
    assert q.urgent(besides=["mine"]) == 2
    assert q.urgent(besides=["mine", "new", "old"]) == 0
