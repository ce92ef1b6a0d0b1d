"""The disaggregation job (engine.lab.jobs.disaggregation), run in this process on the trained
tiny preset: one workload, three arms, the replayed one labelled computed; what it reports, not
how fast."""

from __future__ import annotations

from engine.calc.disaggregation import ARMS
from engine.lab import worker
from engine.lab.results import DisaggregationResult, parse_result
from engine.lab.worker import plain

PARAMS = {"kv_budget_mib": 64, "requests": 4, "rate": 50.0, "long_share": 0.5,
          "short_prompt": [8, 16], "short_output": [3, 4], "long_prompt": [48, 64],
          "long_output": [3, 4], "max_batch": 4, "chunk_size": 16, "mode": "replay"}


def test_one_workload_served_three_ways_with_the_replay_labelled_computed():
    events = []
    result = worker.run("disaggregation", PARAMS, lambda t, d: events.append((t, d)),
                        lambda: False)
    record = parse_result("disaggregation", plain(result))
    assert isinstance(record, DisaggregationResult)
    assert record.to_dict() == plain(result)
    assert [a.arm for a in record.arms] == list(ARMS)
    colocated, chunked, disagg = record.arms
    assert colocated.how == chunked.how == "measured live"
    assert disagg.how == "computed from measured step costs (replay)"
    assert disagg.label.startswith("computed from measured step costs (replay)")
    assert (colocated.chunk_size, chunked.chunk_size) == (0, 16)
    assert set(record.costs) == {"prefill", "decode", "export", "adopt"}
    for arm in record.arms:
        assert arm.metrics.completed == 4
        assert [(r.id, r.size, r.prompt_len) for r in arm.requests] == [
            (r.id, r.size, r.prompt_len) for r in colocated.requests]
        assert all(r.ttft_ms > 0 for r in arm.requests)
        assert arm.metrics.slo_ttft_ms == 1000.0 and arm.metrics.slo_tpot_ms == 100.0
    assert all(r.handover_ms is None for r in colocated.requests + chunked.requests)
    assert all(r.handover_ms > 0 for r in disagg.requests)
    assert {r.size for r in colocated.requests} == {"short", "long"}
    assert record.kv_bytes_per_token == 2 * 6 * 2 * 32 * 4  # tiny: layers, KV heads, dims, fp32
    assert events[-1][1]["message"] == "served"
