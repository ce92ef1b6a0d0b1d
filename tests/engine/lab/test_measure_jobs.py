"""The prefill_point, kv_allocation, block_snapshots and rate_sweep jobs (engine.lab.jobs.measure
and .serving), run in this process on the trained tiny preset with a small KV budget: what they report and that it is consistent, not how fast."""

from __future__ import annotations

import math

import pytest

from engine.config import PRESETS
from engine.errors import ConfigError
from engine.lab import registry, worker
from engine.lab.jobs import measure
from engine.lab.jobs.engines import _engines
from engine.lab.results import parse_result
from engine.lab.worker import plain

SMALL_KV = {"kv_budget_mib": 64}


def run_job(kind: str, params: dict):
    events: list[tuple[str, dict]] = []
    def emit(type_: str, data: dict) -> None:
        if "building" not in data:  # the body's own events, not its engine's build
            events.append((type_, data))

    result = worker.run(kind, params, emit, lambda: False)
    if result is not None:  # its record reads it and gives it back unchanged
        assert parse_result(kind, plain(result)).to_dict() == plain(result)
    return result, events


def test_the_jobs_are_registered():
    for kind in ("prefill_point", "kv_allocation", "block_snapshots", "rate_sweep"):
        assert kind in registry.JOBS
        assert registry.normalize(kind, {}) == registry.JOBS[kind].defaults


def test_prefill_point_places_a_pass_on_the_roofline():
    result, events = run_job("prefill_point", {**SMALL_KV, "prompt_len": 32, "repeats": 2})
    assert result["prompt_len"] == 32 and result["weights"] == "trained"
    assert len(result["ms_all"]) == 2 and result["ms"] > 0
    assert result["intensity"] == pytest.approx(result["flops"] / result["bytes"])
    assert result["achieved_gflops"] == pytest.approx(result["flops"] / result["ms"] / 1e6)
    assert result["intensity"] > 10  # far right of a decode step's ~0.5 FLOP/byte
    assert [e for e, _ in events] == ["progress"] * 3
    assert not _engines_hold_blocks()


def test_prefill_point_refuses_a_prompt_beyond_the_context():
    with pytest.raises(ConfigError, match="prompt_len must be between 1 and 2047"):
        run_job("prefill_point", {**SMALL_KV, "prompt_len": 5000})


def test_kv_allocation_reports_what_the_cache_tensors_occupy():
    result, _ = run_job("kv_allocation", {"blocks": 2})
    names = {(r["preset"], r["dtype"]) for r in result["caches"]}
    assert {("tiny", "float32"), ("tiny", "float16"), ("large", "float16")} <= names
    for r in result["caches"]:
        cfg = PRESETS[r["preset"]]
        assert r["bytes_per_token"] == cfg.kv_bytes_per_token(r["element_bytes"])
        assert r["allocated_bytes"] == r["capacity_tokens"] * r["bytes_per_token"]
        assert r["capacity_tokens"] == 2 * 16 and r["num_blocks"] == 2
        assert r["tensor_shape"] == [cfg.layers, 2, 16, cfg.kv_heads, cfg.head_dim]
    assert sum(r["engine_dtype"] for r in result["caches"]) == len(PRESETS)


def test_block_snapshots_record_every_steps_block_tables():
    result, events = run_job("block_snapshots", {"requests": 5, "rate": 50.0,
                                                 "output_len": [4, 20], "seed": 1})
    snaps, bs = result["snapshots"], result["block_size"]
    assert snaps and all("step" in s for s in snaps)
    assert [s["step"] for s in snaps] == list(range(len(snaps)))
    seen = set()
    for snap in snaps:
        held = [b for seq in snap["seqs"] for b in seq["blocks"]]
        assert len(held) == len(set(held)), "two sequences hold the same block"
        assert all(0 <= b < result["num_blocks"] for b in held)
        for seq in snap["seqs"]:
            assert len(seq["blocks"]) == math.ceil(seq["tokens"] / bs)
            seen.add(seq["id"])
        assert snap["free"] <= result["num_blocks"] - len(held)
    assert seen == {r["id"] for r in result["requests"]}
    assert any(t == "progress" for t, _ in events)
    engine = next(e for key, e in _engines.items() if key[3] == 2)
    assert "step" not in engine.__dict__  # the recording wrapper is gone
    assert engine.blocks.num_used == 0


def test_rate_sweep_reports_per_request_latencies_per_rate():
    params = {**SMALL_KV, "rates": [5.0, 40.0], "requests": 4, "output_len": [4, 12],
              "prompt_len": [8, 24]}
    result, events = run_job("rate_sweep", params)
    points = result["points"]
    assert [p["rate"] for p in points] == [5.0, 40.0]
    for p in points:
        n = p["completed"]
        assert n == 4 and all(len(p[k]) == n for k in ("ttft_ms", "tpot_ms", "e2e_ms",
                                                       "output_len"))
        assert p["throughput_tok_s"] == pytest.approx(p["output_tokens"] / p["duration_s"])
        assert p["requests_per_s"] == pytest.approx(n / p["duration_s"])
        assert sum(p["output_len"]) == p["output_tokens"]
        assert all(e >= t for e, t in zip(p["e2e_ms"], p["ttft_ms"], strict=True))
    steps = [d for t, d in events if t == "step"]
    assert [d["kind"] for d in steps] == ["rate_point", "rate_point"]
    assert steps[1]["rate"] == 40.0


@pytest.mark.parametrize("rates, words", [([], "list of 1 to"), ([0], "rate must be"),
                                          ("fast", "list of 1 to")])
def test_rate_sweep_refuses_bad_rates(rates, words):
    with pytest.raises(ConfigError, match=words):
        run_job("rate_sweep", {**SMALL_KV, "rates": rates})


def _engines_hold_blocks() -> bool:
    return any(e.blocks.num_used for e in _engines.values())


def test_a_knob_point_sends_a_few_progress_events_and_its_last_step(monkeypatch):
    """Each of a point's 31 decode steps sent an event to the web process (on tiny a step is a
    millisecond): now at most one a PROGRESS_EVERY_S, and the last. The period is made longer
    than the whole point, so the count does not depend on how fast this machine is: the first
    step's event and the last."""
    monkeypatch.setattr(measure, "PROGRESS_EVERY_S", 3600.0)
    events = []
    result = worker.run("sweep_point", {"batch_size": 2, "prompt_len": 16, "new_tokens": 32,
                                        "device": "cpu"},
                        lambda type_, data: events.append((type_, data)), lambda: False)
    progress = [d for t, d in events if t == "progress" and "building" not in d]
    assert result["decode_steps_timed"] > 0
    assert progress[-1] == {"done": 31, "total": 31}
    assert [d["done"] for d in progress] == [progress[0]["done"], 31]
