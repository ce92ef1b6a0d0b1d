"""The invariance job (engine.lab.jobs.invariance), run in this process on the trained tiny
preset: its record, its events, and that the batch-invariant mode it asks for is the one run."""

from __future__ import annotations

from engine.lab import worker
from engine.lab.results import InvarianceResult, parse_result
from engine.lab.worker import plain

PARAMS = {"kv_budget_mib": 64, "batch_sizes": [1, 4], "seeds": 1, "prompt_len": 8,
          "new_tokens": 3, "chunk": 3, "batch_invariant": True}


def test_invariance_job_reports_each_batch_and_the_mode_it_ran():
    events: list[tuple[str, dict]] = []
    result = worker.run("invariance", PARAMS, lambda t, d: events.append((t, d)),
                        lambda: False)
    record = parse_result("invariance", plain(result))
    assert isinstance(record, InvarianceResult) and record.to_dict() == plain(result)
    assert record.batch_invariant and record.chunk == 3 and record.preset == "tiny"
    assert [p.batch for p in record.points] == [1, 4]
    assert all(p.max_ulp == 0 and p.texts_differ == 0 for p in record.points)
    steps = [d for t, d in events if t == "step"]
    assert [s["batch"] for s in steps] == [1, 4]
    assert record.spread.what == "decode steps" and record.spread.count == 2 * 2
    assert record.check is not None  # the worker's disturbance check


def test_a_batch_larger_than_the_engines_starting_pool_grows_it_first():
    """No kv_budget_mib, as the lesson sends: the pool starts with room for one full-context
    sequence, and a batch of 32 whose others run up to twice the prompt needs more."""
    params = {"batch_sizes": [32], "seeds": 1, "prompt_len": 48, "new_tokens": 2, "chunk": 0}
    record = parse_result("invariance", plain(worker.run("invariance", params,
                                                         lambda *_: None, lambda: False)))
    assert [p.batch for p in record.points] == [32]
