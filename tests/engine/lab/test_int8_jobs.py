"""The int8_point and int8_quality jobs (engine.lab.jobs.quantization), run in this process on the
trained tiny preset: what they report and that it agrees with the engine's own accounting, not
how fast."""

from __future__ import annotations

import pytest

from engine.errors import ConfigError
from engine.lab import registry, worker
from engine.lab.results import Int8PointResult, Int8QualityResult, parse_result
from engine.lab.worker import plain


def run_job(kind: str, params: dict):
    events: list[tuple[str, dict]] = []
    def emit(type_: str, data: dict) -> None:
        if "building" not in data:  # the body's own events, not its engine's build
            events.append((type_, data))

    result = worker.run(kind, params, emit, lambda: False)
    assert result is not None
    record = parse_result(kind, plain(result))
    assert record.to_dict() == plain(result)  # its record reads it and gives it back unchanged
    return record, events


POINT = {"kv_budget_mib": 64, "batch_size": 2, "prompt_len": 16, "new_tokens": 4}


def test_int8_point_reads_a_quarter_of_the_weight_bytes(int8_kernel):
    int8, events = run_job("int8_point", POINT)
    fp32, _ = run_job("int8_point", {**POINT, "weight_format": "fp32"})
    assert isinstance(int8, Int8PointResult) and int8.weight_format == "int8"
    assert fp32.weight_format == "fp32" and int8.batch_size == fp32.batch_size == 2
    assert 0.25 < int8.weight_bytes / fp32.weight_bytes < 0.26
    # the same KV cache read on top of the weights
    assert int8.bytes_per_step - int8.weight_bytes == fp32.bytes_per_step - fp32.weight_bytes
    assert int8.tpot_ms > 0 and events and events[-1][0] == "progress"


def test_int8_quality_scores_both_models_on_the_held_out_windows(int8_kernel):
    quality, events = run_job("int8_quality", {"windows": 2, "seq_len": 64})
    assert isinstance(quality, Int8QualityResult)
    assert quality.windows == 2 and quality.positions == 128 and quality.device == "cpu"
    assert 0.8 < quality.agreement <= 1.0 and abs(quality.loss_int8 - quality.loss_fp32) < 0.1
    assert events[-1] == ("progress", {"done": 1, "total": 1, "message": "scoring both models"})


@pytest.mark.parametrize("params, words", [
    ({"seq_len": 512}, "seq_len"), ({"windows": 0}, "windows"), ({"preset": "small"}, "preset")])
def test_int8_quality_refuses_what_it_cannot_score(params, words):
    with pytest.raises(ConfigError, match=words):
        registry.JOBS["int8_quality"].check(params)
