"""The disaggregated replay on hand-computed cases: the prefill worker's queue, the export and
import, the decode worker's batches and its limit."""

from __future__ import annotations

import pytest

from engine.calc.disagg_replay import CostTable, ReplayRequest, WorkerCosts, replay


def flat(seconds: float) -> CostTable:
    return CostTable((1.0,), (seconds,))


# prefill 0.1 s a token, a decode step 0.5 s at batch 1 and 0.6 s at batch 2
COSTS = WorkerCosts(prefill=CostTable((10, 20), (1.0, 2.0)), decode=CostTable((1, 2), (0.5, 0.6)),
                    export=flat(0.1), adopt=flat(0.2))


def test_cost_table_interpolates_extends_and_never_goes_below_zero():
    table = CostTable((10, 20, 40), (1.0, 2.0, 2.5))
    assert table.at(15) == pytest.approx(1.5)
    assert table.at(30) == pytest.approx(2.25)
    assert table.at(60) == pytest.approx(3.0)  # the last segment's line
    assert table.at(0) == 0.0  # 1.0 - 0.1 * 10, not below zero
    assert flat(0.3).at(1000) == 0.3
    assert CostTable.from_json(table.to_json()) == table
    with pytest.raises(ValueError):
        CostTable((2, 1), (0.1, 0.2))


def test_a_prompt_waits_for_the_prefill_worker_and_its_export():
    a, b = replay([ReplayRequest(0, 0.0, 10, 3), ReplayRequest(1, 0.5, 20, 2)], COSTS, 4)
    assert (a.prefill_start_s, a.first_token_s, a.sent_s) == pytest.approx((0.0, 1.0, 1.1))
    # b arrived at 0.5 but the prefill worker was busy with a until 1.1
    assert (b.prefill_start_s, b.first_token_s, b.sent_s) == pytest.approx((1.1, 3.1, 3.2))
    assert a.admitted_s == pytest.approx(1.3)  # 1.1 + its import
    assert a.token_s == pytest.approx([1.0, 1.8, 2.3])
    assert b.admitted_s == pytest.approx(3.4)
    assert b.token_s == pytest.approx([3.1, 3.9])
    assert a.handover_s == pytest.approx(0.3)
    assert b.to_json()["finish_s"] == pytest.approx(3.9)
    assert b.to_json()["admitted_s"] == pytest.approx(1.1)


def test_a_handover_waits_for_the_decode_step_in_progress():
    a, b = replay([ReplayRequest(0, 0.0, 10, 3), ReplayRequest(1, 0.0, 10, 3)], COSTS, 4)
    assert b.sent_s == pytest.approx(2.2)
    # the decode worker is in a's step (1.8 to 2.3) when b is sent: it takes b after it
    assert a.token_s == pytest.approx([1.0, 1.8, 2.3])
    assert b.admitted_s == pytest.approx(2.5)
    assert b.handover_s == pytest.approx(0.4)
    assert b.token_s == pytest.approx([2.1, 3.0, 3.5])


def test_the_decode_worker_batches_up_to_its_limit():
    quick = WorkerCosts(prefill=flat(0.1), decode=COSTS.decode, export=flat(0.0),
                        adopt=flat(0.0))
    reqs = [ReplayRequest(0, 0.0, 8, 3), ReplayRequest(1, 0.0, 8, 3)]
    a, b = replay(reqs, quick, 2)
    assert a.token_s == pytest.approx([0.1, 0.6, 1.2])  # batch 1, then batch 2 with b
    assert b.token_s == pytest.approx([0.2, 1.2, 1.7])
    a, b = replay(reqs, quick, 1)
    assert a.token_s == pytest.approx([0.1, 0.6, 1.1])
    assert b.admitted_s == pytest.approx(1.1)  # one slot: b waits for a to finish
    assert b.token_s == pytest.approx([0.2, 1.6, 2.1])


def test_a_one_token_request_ends_at_its_prefill():
    (a,) = replay([ReplayRequest(0, 0.25, 10, 1)], COSTS, 1)
    assert a.token_s == pytest.approx([1.25])
    assert a.admitted_s == pytest.approx(1.55)
