"""The disaggregated run, live: two spawned workers give the colocated run's greedy tokens, time
each request's handover, and leave no process behind, whether the run ends normally or not."""

from __future__ import annotations

import multiprocessing

import pytest

from engine.config import EngineConfig
from engine.disagg.live import DisaggError, run_live, split_cores
from engine.scheduler import SchedulerConfig
from engine.serve.loop import run
from engine.serve.workload import Request

TEXTS = ["The quick brown fox", "def main():\n    return the value of", "A list is a mutable",
         "In the beginning"]
NEW_TOKENS = 10


def requests(engine) -> list[Request]:
    return [Request(i, engine.tokenizer.encode(t), NEW_TOKENS, arrival_s=0.02 * i)
            for i, t in enumerate(TEXTS)]


def test_split_cores_gives_each_worker_its_own():
    assert split_cores((0,)) is None
    assert split_cores((0, 1)) == ([0], [1])
    assert split_cores((0, 1, 2, 3, 4)) == ([0, 1], [2, 3, 4])


def test_disaggregated_tokens_equal_colocated_and_handover_is_timed(engine):
    reqs = requests(engine)
    colocated = run(engine, reqs, SchedulerConfig(policy="continuous", max_batch=4))
    config = EngineConfig(preset="tiny", device="cpu", kv_budget_bytes=8 * 2**20)
    before = set(multiprocessing.active_children())
    live = run_live(config, reqs, max_batch=4)
    assert set(multiprocessing.active_children()) <= before
    assert [t.output_ids for t in live.requests] == [t.output_ids for t in colocated.requests]
    for trace in live.requests:
        assert len(trace.token_s) == NEW_TOKENS
        assert trace.arrival_s <= trace.admitted_s < trace.first_token_s == trace.token_s[0]
        assert trace.token_s == sorted(trace.token_s)
        # the second token comes after the handover ended
        handover_end = trace.first_token_s + live.handover_ms[trace.id] / 1000
        assert handover_end < trace.token_s[1]
        assert live.handover_ms[trace.id] > 0 and live.export_ms[trace.id] > 0
        blocks = -(-trace.prompt_len // engine.cache.block_size)
        assert live.kv_bytes[trace.id] == blocks * engine.cache.bytes_per_block
    assert {s.prefill_tokens for s in live.steps if s.prefill_tokens} <= {
        t.prompt_len for t in live.requests}
    assert set(live.workers) == {"prefill", "decode"}


def test_a_failing_worker_ends_the_run_with_one_line_and_no_process_left(engine):
    reqs = [Request(0, list(range(1, 40)), 4, arrival_s=0.0)]
    # one usable block of 16 tokens (the other is the scratch block): the 39-token prompt
    # cannot be prefilled
    config = EngineConfig(preset="tiny", device="cpu",
                          kv_budget_bytes=2 * engine.cache.bytes_per_block)
    before = set(multiprocessing.active_children())
    with pytest.raises(DisaggError, match="prefill worker failed: .*cannot hold"):
        run_live(config, reqs, max_batch=2)
    assert set(multiprocessing.active_children()) <= before
