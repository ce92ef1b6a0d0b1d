"""The deployment plan's arithmetic (engine.calc.deployment): Little's law both ways, the batch the
plan picks and why none when a target is out of reach, replicas at the fill share, the cost per
million tokens, a load test's measured rate (lesson 8's sweep) as a second count of replicas,
one targets record for the plan and the capacity search, and the tensor-parallel floors against
replicas on a datasheet GPU."""

from __future__ import annotations

import math

import pytest

from engine.calc import capacity
from engine.calc.deployment import (
    ATTAINMENT,
    BatchPoint,
    Demand,
    LoadCheck,
    LoadPoint,
    MeasuredRate,
    allreduce_bytes,
    allreduce_ms,
    e2e_ms,
    gpu_points,
    highest_rate_within,
    in_flight,
    next_batch_misses,
    plan,
    replica_rps,
    replicas_needed,
    tp_against_replicas,
    tp_step_ms,
)
from engine.calc.gpu_scaling import A100, H100, LLAMA_3_8B, decode_step, step_floor_ms
from engine.calc.slo_math import SLO, Targets

POINTS = [BatchPoint(1, 20.0, 5.0), BatchPoint(8, 60.0, 9.0), BatchPoint(32, 150.0, 30.0),
          BatchPoint(64, 400.0, 80.0)]


def test_littles_law_both_ways():
    assert e2e_ms(100.0, 10.0, 11) == 200.0  # the first token, then 10 gaps
    assert e2e_ms(100.0, 10.0, 1) == 100.0
    assert in_flight(12.0, 2500.0) == pytest.approx(30.0)
    assert replica_rps(16, 2000.0) == pytest.approx(8.0)
    # a replica that completes batch / E2E per second, fed that rate, holds `batch` in flight
    assert in_flight(replica_rps(16, 2000.0), 2000.0) == pytest.approx(16.0)


def test_replicas_round_up_at_the_fill_share():
    assert replicas_needed(10.0, 10.0, fill=1.0) == 1
    assert replicas_needed(10.0, 10.0, fill=0.8) == 2  # 10 / 8 = 1.25
    assert replicas_needed(0.1, 10.0) == 1
    assert replicas_needed(80.0, 10.0, fill=0.8) == 10  # exactly 10, not 11 from rounding
    with pytest.raises(ValueError, match="fill share"):
        replicas_needed(1.0, 1.0, fill=0.0)


def test_the_plan_takes_the_batch_within_targets_that_serves_most():
    demand = Demand(rate_rps=20.0, prompt_len=64, output_len=33)
    p = plan(POINTS, demand, Targets(ttft_ms=200.0, tpot_ms=40.0))
    assert p.batch == 32  # batch 64 misses both targets
    e2e = 150.0 + 32 * 30.0
    assert p.e2e_ms == e2e and p.replica_rps == pytest.approx(32_000 / e2e)
    assert p.replicas == math.ceil(20.0 / (0.8 * 32_000 / e2e))
    assert p.utilisation <= 0.8 and p.per_replica_rate * p.replicas == pytest.approx(20.0)
    assert p.in_flight == pytest.approx(20.0 * e2e / 1000)
    tokens = 20.0 * 33
    assert p.cost_per_million(2.0) == pytest.approx(p.replicas * 2.0 / 3600 * 1e6 / tokens)
    # a tighter TPOT target moves the plan to a smaller batch and more replicas
    tight = plan(POINTS, demand, Targets(ttft_ms=200.0, tpot_ms=10.0))
    assert tight.batch == 8 and tight.replicas > p.replicas


def test_no_plan_when_even_the_fastest_batch_misses_a_target():
    demand = Demand(10.0, 64, 32)
    p = plan(POINTS, demand, Targets(ttft_ms=1000.0, tpot_ms=4.0))
    assert not p.feasible and p.replicas is None and p.cost_per_million(1.0) is None
    assert "batch 1's TPOT, 5 ms, is over the 4 ms target" in p.why
    assert "more replicas add requests per second, not speed per request" in p.why
    p = plan(POINTS, demand, Targets(ttft_ms=10.0, tpot_ms=100.0))
    assert "batch 1's TTFT, 20 ms, is over the 10 ms target" in p.why
    with pytest.raises(ValueError):
        plan([], demand, Targets(1.0, 1.0))


def test_one_targets_record_for_the_plan_and_the_capacity_search():
    assert capacity.Targets is Targets  # lesson 8's search and lesson 12's plan share it
    t = Targets.per_user(500.0, 20.0)  # at least 20 tokens/s each: TPOT at most 50 ms
    assert t == Targets(ttft_ms=500.0, tpot_ms=50.0) and t.per_user_tok_s == 20.0
    assert t.slo() == SLO(ttft_ms=500.0, tpot_ms=50.0)
    free = Targets.per_user(500.0, 0.0)  # no speed target: any TPOT passes
    assert free.tpot_ms == math.inf and free.per_user_tok_s == 0.0


def load(rate, ttft, tpot=10.0, n=20, tok_s=None):
    """A rate of a load test: n requests, all with this TTFT and TPOT."""
    return LoadPoint(rate, [ttft] * n, [tpot] * n, tok_s if tok_s is not None else rate * 30)


def test_the_highest_rate_within_the_targets_stops_at_the_first_that_missed():
    t = Targets(ttft_ms=200.0, tpot_ms=50.0)
    ok, late = load(4, 100.0), load(8, 300.0)
    assert highest_rate_within([load(16, 100.0), late, ok], t) == ok  # 16 after a miss: luck
    assert highest_rate_within([late], t) is None
    # 19 of 20 within (95%) passes, 18 of 20 does not; a one-token answer has no TPOT
    edge = LoadPoint(2, [100.0] * 19 + [900.0], [None] * 20, 60.0)
    assert edge.met_share(t) == 0.95 and highest_rate_within([edge], t) == edge
    worse = LoadPoint(2, [100.0] * 18 + [900.0] * 2, [10.0] * 20, 60.0)
    assert highest_rate_within([worse], t) is None
    assert highest_rate_within([load(4, 100.0, tok_s=0.0)], t) is None  # no tokens: no rate


def test_a_load_test_of_the_planned_batch_is_a_second_count_of_replicas():
    demand = Demand(rate_rps=20.0, prompt_len=64, output_len=33)
    t = Targets(ttft_ms=200.0, tpot_ms=40.0)
    alone = plan(POINTS, demand, t)
    assert alone.batch == 32 and alone.replicas_from_load is None
    # lesson 8 measured batch limit 32 carrying 4 requests/s of 40 output tokens within targets
    slow = MeasuredRate(rate_rps=4.0, output_tok_s=160.0, batch=32)
    assert slow.demand_rps(demand) == pytest.approx(160.0 / 33)
    p = plan(POINTS, demand, t, measured={32: slow, 8: MeasuredRate(1.0, 1.0, 8)})
    assert p.measured == slow and p.replicas_from_points == alone.replicas
    assert p.replicas_from_load == math.ceil(20.0 / (160.0 / 33)) == 5  # no headroom added
    assert p.replicas == max(alone.replicas, 5) and p.set_by_load is (5 > alone.replicas)
    fast = plan(POINTS, demand, t, measured={32: MeasuredRate(100.0, 1e6, 32)})
    assert fast.replicas_from_load == 1 and fast.replicas == alone.replicas
    assert not fast.set_by_load
    # a measurement of another batch limit is another replica: not used
    assert plan(POINTS, demand, t, measured={8: slow}).measured is None


def test_gpu_points_are_datasheet_floors_and_stop_where_the_kv_cache_is_full():
    demand = Demand(100.0, 2000, 1000)
    points = gpu_points(LLAMA_3_8B, H100, demand)
    assert [p.batch for p in points] == [1, 2, 4, 8, 16, 32, 64, 128]  # 256 x 3,008 tokens: no
    for p in points:
        floor = step_floor_ms(decode_step(LLAMA_3_8B, p.batch, 2500.0), H100)
        assert p.tpot_ms == pytest.approx(floor) and p.ttft_ms > p.tpot_ms
    # the step floor at batch 1 is the weights over the bandwidth: 16 GB at 3.35 TB/s
    assert points[0].tpot_ms == pytest.approx(1000 * 16.06e9 / 3.35e12, rel=0.05)


def test_tensor_parallel_splits_the_step_and_adds_two_all_reduces_per_layer():
    assert allreduce_bytes(LLAMA_3_8B, 32, 1) == 0.0
    one = 32 * 4096 * 2  # batch x hidden x bf16
    assert allreduce_bytes(LLAMA_3_8B, 32, 2) == pytest.approx(2 * 32 * (2 * 1 / 2) * one)
    assert allreduce_bytes(LLAMA_3_8B, 32, 8) == pytest.approx(2 * 32 * (2 * 7 / 8) * one)
    assert allreduce_ms(LLAMA_3_8B, H100, 32, 2) == pytest.approx(
        1000 * allreduce_bytes(LLAMA_3_8B, 32, 2) / 450e9)
    assert allreduce_ms(LLAMA_3_8B, A100, 32, 2) > allreduce_ms(LLAMA_3_8B, H100, 32, 2)
    single = tp_step_ms(LLAMA_3_8B, H100, 32, 1000.0)
    assert tp_step_ms(LLAMA_3_8B, H100, 32, 1000.0, 2) == pytest.approx(
        single / 2 + allreduce_ms(LLAMA_3_8B, H100, 32, 2))
    rows = tp_against_replicas(LLAMA_3_8B, H100, 32, Demand(10.0, 1000, 200))
    assert [r.gpus for r in rows] == [1, 2, 4, 8]
    assert rows[0].tp_tok_s == pytest.approx(rows[0].replicas_tok_s)
    for r in rows[1:]:
        # t GPUs in tensor parallel: a shorter step, more KV room, fewer tokens than t replicas
        assert r.tpot_ms < rows[0].tpot_ms and r.max_batch > rows[0].max_batch
        assert r.tp_tok_s < r.replicas_tok_s


@pytest.mark.parametrize("targets, ways", [
    (Targets(ttft_ms=1000.0, tpot_ms=100.0),
     ("faster machine", "quantized", "speculative decoding", "tensor parallelism")),
    (Targets(ttft_ms=5.0, tpot_ms=1000.0), ("faster machine", "prefix cache", "tensor parallelism")),
])
def test_with_no_plan_the_message_names_the_ways_to_a_shorter_step(targets, ways):
    from engine.calc.deployment import BatchPoint, Demand, plan

    p = plan([BatchPoint(1, ttft_ms=10.0, tpot_ms=500.0)], Demand(1.0, 16, 16), targets)
    assert p.point is None
    assert all(way in p.why for way in ways), p.why
    assert ("speculative" in p.why) is (targets.tpot_ms < 500.0)


def test_the_next_larger_batch_says_which_target_binds():
    demand = Demand(rate_rps=1.0, prompt_len=32, output_len=8)
    p = plan(POINTS, demand, Targets(ttft_ms=100.0, tpot_ms=40.0))
    assert p.feasible and p.batch == 8  # batch 32 misses the TTFT target only
    assert next_batch_misses(p, POINTS) == "TTFT"
    p = plan(POINTS, demand, Targets(ttft_ms=1000.0, tpot_ms=20.0))
    assert p.batch == 8 and next_batch_misses(p, POINTS) == "TPOT"  # 32 misses both: TPOT first
    p = plan(POINTS, demand, Targets(ttft_ms=1000.0, tpot_ms=100.0))
    assert p.batch == 32 and next_batch_misses(p, POINTS) is None  # 64 met both, served fewer
    p = plan(POINTS[:2], demand, Targets(ttft_ms=1000.0, tpot_ms=100.0))
    assert p.batch == 8 and next_batch_misses(p, POINTS[:2]) is None  # the largest was taken


def test_a_load_check_holds_at_the_attainment_bar():
    assert LoadCheck(good=19, finished=20).held == (19 / 20 >= ATTAINMENT)
    assert LoadCheck(good=19, finished=20).share == pytest.approx(0.95)
    assert not LoadCheck(good=18, finished=20).held
    assert not LoadCheck(good=0, finished=0).held and LoadCheck(0, 0).share == 0.0
