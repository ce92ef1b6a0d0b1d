"""Traffic classes (engine/traffic.py): the class spec, the token bucket on a fake clock, the
arrival decisions, and the continuous scheduler's admission under classes, driven by hand on the
real block bookkeeping (no model), then one short real run of a mixed workload on tiny."""

from __future__ import annotations

import random

import pytest
from test_scheduler import PoolOnly, fake_step

from engine.errors import ConfigError
from engine.scheduler import ContinuousScheduler, SchedulerConfig
from engine.sequence import Sequence
from engine.serve.loop import run
from engine.traffic import RefusalKind, TokenBucket, TrafficState, parse_classes
from engine.traffic_mix import BATCH, FLOOD_TENANT, INTERACTIVE, MixSpec, make_mix

LANES = "interactive:priority=2,max_new=32,max_prompt=64;batch:priority=1,max_running=2"


# ---- the spec ------------------------------------------------------------------------------
def test_the_spec_reads_classes_and_keys():
    policy = parse_classes(LANES + ",tenant_rate=50,tenant_burst=200", "weighted")
    assert policy.names == ["interactive", "batch"] and policy.order == "weighted"
    batch = policy.get("batch")
    assert (batch.priority, batch.max_running, batch.tenant_rate, batch.tenant_burst) == \
        (1, 2, 50.0, 200.0)
    assert policy.background is batch


@pytest.mark.parametrize("text, words", [
    ("chat:speed=3", "cannot read 'speed=3'"),
    ("chat:max_running=two", "max_running must be a whole number"),
    ("chat:max_running=0", "max_running must be at least 1"),
    ("chat:weight=0", "weight must be"),
    ("a:priority=1;a:priority=2", "unique"),
    ("chat:tenant_burst=5", "tenant_burst needs a tenant_rate"),
])
def test_a_bad_spec_is_one_clear_line(text, words):
    with pytest.raises(ConfigError, match=words) as err:
        parse_classes(text)
    assert "\n" not in str(err.value)


# ---- the token bucket ----------------------------------------------------------------------
@pytest.mark.parametrize("seed", range(20))
def test_a_bucket_admits_no_more_than_rate_times_window_plus_burst(seed):
    rnd = random.Random(seed)
    rate, burst = rnd.uniform(0.5, 50), rnd.uniform(1, 40)
    bucket = TokenBucket(rate, burst)
    now, taken = 0.0, []
    for _ in range(400):  # greedy clients: take whenever the bucket allows
        now += rnd.expovariate(rate * rnd.uniform(0.5, 4))
        amount = rnd.uniform(0.2, 1) * min(burst, rnd.uniform(1, 10))
        if bucket.can_take(now, amount):
            bucket.take(now, amount)
            taken.append((now, amount))
    assert taken, "the bucket admitted nothing"
    for i, (start, _) in enumerate(taken):  # every window that starts and ends at an admission
        total = 0.0
        for end, amount in taken[i:]:
            total += amount
            assert total <= rate * (end - start) + burst + 1e-6
    # and it does admit what the rate allows: a full bucket after a long pause takes a burst
    assert bucket.can_take(now + burst / rate + 1, burst)


def test_a_bucket_says_when_it_will_hold_enough():
    bucket = TokenBucket(rate=10, burst=100)
    bucket.take(1.0, 100)
    assert not bucket.can_take(2.0, 50)
    assert bucket.ready_at(50) == pytest.approx(6.0)
    assert bucket.can_take(6.0, 50)
    assert bucket.ready_at(101) == float("inf")


# ---- arrival ---------------------------------------------------------------------------------
def test_a_request_over_its_class_cap_is_refused_with_the_reason():
    state = TrafficState(parse_classes(LANES))
    reason = state.arrive(0, "interactive", "ann", prompt_len=10, max_new=100, waiting=[])
    assert reason == ("refused: class 'interactive' caps new tokens at 32; this request "
                      "asked for 100")
    assert 0 not in state.tags


def test_an_oversized_prompt_moves_to_the_background_class():
    state = TrafficState(parse_classes(LANES))
    tag = state.arrive(0, "interactive", "ann", prompt_len=500, max_new=100, waiting=[])
    assert tag.traffic_class == "batch" and tag.moved and tag.cost == 600
    # the cap it is judged by is the background class's (none), not the one it asked for
    assert state.arrive(1, "interactive", "ann", 20, 8, []).traffic_class == "interactive"


def test_a_full_queue_an_unknown_class_and_an_impossible_quota_are_refused():
    state = TrafficState(parse_classes("chat:max_waiting=2,tenant_rate=10,tenant_burst=50"))
    assert state.arrive(0, None, "a", 10, 10, []).traffic_class == "chat"  # first class
    state.arrive(1, "chat", "a", 10, 10, [0])
    assert "queue is full (2 waiting)" in state.arrive(2, "chat", "a", 10, 10, [0, 1])
    assert "no traffic class 'video'" in state.arrive(3, "video", "a", 10, 10, [])
    assert "holds at most 50 tokens; this request needs 60" in \
        state.arrive(4, "chat", "a", 40, 20, [])



def test_each_refusal_names_its_kind():
    state = TrafficState(parse_classes("chat:max_new=16,max_waiting=1,tenant_rate=10,"
                                       "tenant_burst=50"))
    assert state.arrive(0, "video", "a", 10, 10, []).kind is RefusalKind.CAP
    assert state.arrive(1, "chat", "a", 10, 20, []).kind is RefusalKind.CAP
    assert state.arrive(2, "chat", "a", 40, 16, []).kind is RefusalKind.QUOTA  # 56 > 50
    state.arrive(3, "chat", "a", 10, 10, [])
    assert state.arrive(4, "chat", "b", 10, 10, [3]).kind is RefusalKind.QUEUE_FULL


def test_over_quota_refuse_turns_away_what_the_bucket_cannot_pay_and_says_when_it_can():
    state = TrafficState(parse_classes("chat:tenant_rate=2,tenant_burst=30",
                                       over_quota="refuse"))
    assert state.arrive(0, "chat", "flood", 10, 10, [], now=0.0).cost == 20
    state.admit(0, 0.0)  # 10 tokens left in flood's bucket
    no = state.arrive(1, "chat", "flood", 10, 5, [], now=1.0)  # 15 > 10 + 2 refilled
    assert no.kind is RefusalKind.QUOTA and no.retry_after_s == pytest.approx(1.5)
    assert "over its quota in class 'chat'" in no and "retry in 1.5 s" in no
    assert state.arrive(2, "chat", "ann", 10, 5, [], now=1.0).cost == 15  # ann's own bucket
    # the tenant's requests still waiting count against what its bucket holds
    assert state.arrive(3, "chat", "flood", 5, 5, [2], now=2.5).cost == 10  # 10 + 5 >= 10
    late = state.arrive(4, "chat", "flood", 2, 3, [2, 3], now=2.5)  # 15 needed, 15 held
    assert late.cost == 5
    assert state.arrive(5, "chat", "flood", 1, 1, [2, 3, 4], now=2.5).kind is RefusalKind.QUOTA
    # waiting instead (the default), the same request is let in to wait for its refill
    waiting = TrafficState(parse_classes("chat:tenant_rate=2,tenant_burst=30"))
    waiting.arrive(0, "chat", "flood", 10, 10, [])
    waiting.admit(0, 0.0)
    assert waiting.arrive(1, "chat", "flood", 10, 5, [], now=1.0).cost == 15


# ---- admission in the continuous scheduler ------------------------------------------------
def scheduler(spec: str, order: str = "strict", max_batch: int = 4, blocks: int = 64):
    config = SchedulerConfig(policy="continuous", max_batch=max_batch, chunk_size=0,
                             max_tokens_per_step=4096, traffic=parse_classes(spec, order))
    return ContinuousScheduler(PoolOnly(num_blocks=blocks), config)


def seq(i: int, prompt: int = 8, new: int = 4) -> Sequence:
    return Sequence(id=i, prompt_ids=[1] * prompt, max_new_tokens=new)


def drive(sched, arrivals, until: float = 50.0, dt: float = 0.1):
    """Steps on a fake clock; arrivals are (time, Sequence, class, tenant). Returns the
    admissions as (time, id) and checks the strict rule at every admission."""
    pending = sorted(arrivals, key=lambda a: a[0])
    admitted, now = [], 0.0
    while now < until and (pending or sched.has_work):
        while pending and pending[0][0] <= now:
            _, s, cls, tenant = pending.pop(0)
            assert sched.add(s, now, cls, tenant) is None
        waiting_before = {s.id: sched.traffic_class(s.id) for s in sched.waiting}
        plan = sched.schedule(now, more_coming=bool(pending))
        if plan is not None:
            for s in plan.admitted:
                admitted.append((now, s.id))
            yield_check(sched, plan, waiting_before)
            fake_step(plan)
            for s in [s for s in sched.running if s.done]:
                sched.finish(s)
        now = round(now + dt, 6)
    return admitted


def yield_check(sched, plan, waiting_before):
    """Strict priority: no batch request enters while an interactive one waits, unless the
    interactive lane is closed (its max_running reached)."""
    lanes = sched.config.traffic
    if lanes.order != "strict":
        return
    for s in plan.admitted:
        mine = lanes.get(sched.traffic_class(s.id)).priority
        higher = [i for i, c in waiting_before.items()
                  if lanes.get(c).priority > mine and i not in {a.id for a in plan.admitted}]
        assert not higher, f"request {s.id} went ahead of higher-priority {higher}"


@pytest.mark.parametrize("seed", range(6))
def test_strict_priority_admits_every_waiting_interactive_request_before_a_batch_one(seed):
    rnd = random.Random(seed)
    sched = scheduler("interactive:priority=2;batch:priority=1", max_batch=3)
    arrivals = [(0.0, seq(i, 40, 6), "batch", "job") for i in range(6)]
    arrivals += [(round(rnd.uniform(0, 3), 1), seq(100 + i, 8, 3), "interactive", f"u{i}")
                 for i in range(10)]
    admitted = drive(sched, arrivals)
    assert len(admitted) == 16
    assert not sched.has_work


def test_a_class_never_holds_more_than_its_max_running():
    sched = scheduler("interactive:priority=2;batch:priority=1,max_running=1", max_batch=4)
    arrivals = [(0.0, seq(i, 16, 5), "batch", "job") for i in range(4)]
    peak, now = 0, 0.0
    for t, s, c, tenant in arrivals:
        sched.add(s, t, c, tenant)
    while sched.has_work:
        plan = sched.schedule(now, more_coming=False)
        peak = max(peak, sum(sched.traffic_class(s.id) == "batch" for s in sched.running))
        fake_step(plan)
        for s in [s for s in sched.running if s.done]:
            sched.finish(s)
        now += 0.1
    assert peak == 1


def test_a_tenant_over_its_quota_waits_while_other_tenants_go_past():
    sched = scheduler("chat:tenant_rate=10,tenant_burst=24")
    flood = [seq(i, 8, 4) for i in range(3)]  # 12 tokens each: the burst holds two
    other = seq(9, 8, 4)
    for s in flood:
        sched.add(s, 0.0, "chat", "flood")
    sched.add(other, 0.0, "chat", "ann")
    plan = sched.schedule(0.0, more_coming=False)
    assert [s.id for s in plan.admitted] == [0, 1, 9]  # flood's third waits, ann goes past
    assert [s.id for s in sched.waiting] == [2]
    fake_step(plan)
    for s in list(sched.running):
        sched.finish(s)
    assert sched.schedule(0.5, more_coming=False) is None  # 5 of 12 tokens back by now
    assert sched.next_wakeup() == pytest.approx(1.2)  # the loop sleeps until the refill
    assert [s.id for s in sched.schedule(1.2, more_coming=False).admitted] == [2]


def test_weighted_shares_admit_in_proportion_while_both_wait():
    sched = scheduler("interactive:weight=3;batch:weight=1", order="weighted", max_batch=1)
    for i in range(8):
        sched.add(seq(i), 0.0, "interactive", "u")
        sched.add(seq(100 + i), 0.0, "batch", "job")
    order = []
    now = 0.0
    while len(order) < 8:
        plan = sched.schedule(now, more_coming=False)
        order += [sched.traffic_class(s.id) for s in plan.admitted]
        fake_step(plan)
        for s in [s for s in sched.running if s.done]:
            sched.finish(s)
        now += 0.1
    assert order.count("interactive") == 6 and order.count("batch") == 2


def test_classes_need_the_continuous_policy():
    with pytest.raises(ConfigError, match="continuous"):
        SchedulerConfig(policy="static", traffic=parse_classes("a")).validate()


# ---- one real run ----------------------------------------------------------------------------
def test_a_mixed_run_with_lanes_and_a_quota_on_the_tiny_engine(tiny_engine):
    engine = tiny_engine
    spec = MixSpec(chat_requests=6, chat_rate=40, chat_prompt=(8, 16), chat_output=(2, 4),
                   batch_requests=3, batch_prompt=(96, 128), batch_output=(4, 6),
                   flood_requests=6, flood_rate=200, seed=3)
    requests = make_mix(spec, engine.tokenizer)
    assert {r.traffic_class for r in requests} == {INTERACTIVE, BATCH}
    lanes = parse_classes("interactive:priority=2,tenant_rate=20,tenant_burst=60,max_new=4;"
                          "batch:priority=1,max_running=1")
    config = SchedulerConfig(policy="continuous", max_batch=4, chunk_size=64, traffic=lanes)
    result = run(engine, requests, config)
    assert engine.blocks.num_used == 0
    by_id = {t.id: t for t in result.requests}
    for r in requests:
        t = by_id[r.id]
        assert t.traffic_class == r.traffic_class and t.tenant == r.tenant
        assert t.refused is None and len(t.token_s) == r.output_len  # all within the caps
    flood = sorted(by_id[r.id].admitted_s for r in requests if r.tenant == FLOOD_TENANT)
    # the flood's bucket holds 60 tokens and refills 20 a second: its admissions spread out
    costs = {r.id: len(r.prompt_ids) + r.output_len for r in requests}
    assert sum(costs[r.id] for r in requests if r.tenant == FLOOD_TENANT) > 60
    assert flood[-1] - flood[0] > 0.5
    assert result.to_json()["config"]["traffic"]["order"] == "strict"
