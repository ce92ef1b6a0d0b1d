"""The traffic-classes job (lesson 16) on the tiny engine at a small size: four runs of one mix,
each request's record typed, and the quota run's flooding tenant held to its bucket."""

from __future__ import annotations

from engine.lab.results import parse_result
from engine.lab.worker import run
from engine.traffic_mix import BATCH, FLOOD_TENANT, INTERACTIVE

PARAMS = {"chat_requests": 4, "chat_rate": 40.0, "chat_prompt": [8, 16], "chat_output": [2, 4],
          "batch_requests": 2, "batch_prompt": [64, 96], "batch_output": [3, 4],
          "flood_requests": 6, "flood_rate": 100.0, "tenant_rate": 100.0, "tenant_burst": 60.0,
          "max_prompt": 32, "max_batch": 4, "chunk_size": 64}


def test_the_mix_served_four_ways():
    result = parse_result("traffic_classes", run("traffic_classes", PARAMS, lambda *_: None,
                                                 lambda: False))
    assert [r.name for r in result.runs] == ["fifo", "lanes", "flood", "quota"]
    fifo, lanes, flood, quota = result.runs
    assert fifo.classes is None and "tenant_rate=100" in quota.classes
    # fifo and lanes serve the same requests; the flood runs add the flooding tenant's
    same = [(r.prompt_len, r.output_len, r.arrival_s) for r in fifo.requests]
    assert same == [(r.prompt_len, r.output_len, r.arrival_s) for r in lanes.requests]
    assert len(flood.requests) == len(quota.requests) == len(fifo.requests) + 6
    for r in (r for run_ in result.runs for r in run_.requests):
        assert r.refused is None and r.finish_s is not None and len(r.token_s) == r.output_len
        assert r.traffic_class in (INTERACTIVE, BATCH)
    # the quota: the flood's admitted tokens over any window stay within rate * w + burst
    admitted = sorted((r.admitted_s, r.prompt_len + r.output_len) for r in quota.requests
                      if r.tenant == FLOOD_TENANT)
    for i, (start, _) in enumerate(admitted):
        total = 0
        for end, cost in admitted[i:]:
            total += cost
            assert total <= 100.0 * (end - start) + 60.0 + 1e-6
