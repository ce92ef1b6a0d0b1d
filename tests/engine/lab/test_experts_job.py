"""The experts_point job (engine.lab.jobs.experts) run in this process on moe-tiny: what a step
read of the experts, against the formula, and the record's shape; not how fast."""

from __future__ import annotations

import pytest

from engine.calc.experts import MoEShape, expected_distinct, step_weight_bytes
from engine.config import get_preset
from engine.lab import registry, worker
from engine.lab.results import ExpertsPointResult, parse_result
from engine.lab.worker import plain
from engine.sweep import WARMUP_STEPS
from tests.engine.model.moe_plan import seed_step_plan

CFG = get_preset("moe-tiny")
PARAMS = {"preset": "moe-tiny", "backend": "torch", "device": "cpu", "kv_budget_mib": 8,
          "prompt_len": 8, "new_tokens": 6}


@pytest.fixture(scope="module")
def points() -> dict[int, ExpertsPointResult]:
    seed_step_plan(backend="torch")
    out = {}
    for batch in (1, 16):
        result = worker.run("experts_point", {**PARAMS, "batch_size": batch}, lambda *_: None,
                            lambda: False)
        assert parse_result("experts_point", plain(result)).to_dict() == plain(result)
        out[batch] = parse_result("experts_point", plain(result))
    return out


def test_the_kind_is_registered_for_the_expert_presets():
    spec = registry.JOBS["experts_point"]
    assert spec.result is ExpertsPointResult and spec.defaults["preset"] == "moe-mini"
    with pytest.raises(Exception, match="preset"):
        spec.check({"preset": "tiny"})


def test_batch_one_reads_its_top_k_experts_in_every_layer(points):
    p = points[1]
    assert p.experts_read == CFG.top_k and p.experts_read_layers == [CFG.top_k] * CFG.layers
    assert len(p.experts_read_steps) == p.decode_steps_timed == 6 - 1 - WARMUP_STEPS
    assert p.expected_experts == pytest.approx(CFG.top_k)
    assert p.step_weight_bytes == p.active_params * 4  # float32: only the active weights


def test_a_larger_batch_reads_more_experts_and_more_bytes(points):
    one, many = points[1], points[16]
    assert CFG.top_k < many.experts_read <= CFG.experts
    assert many.expected_experts == pytest.approx(expected_distinct(CFG.experts, CFG.top_k, 16))
    assert many.step_weight_bytes == int(step_weight_bytes(MoEShape.of(CFG), many.experts_read, 4))
    assert many.step_weight_bytes > one.step_weight_bytes
    assert many.bytes_per_step > one.bytes_per_step  # weights read plus KV
    assert many.tokens_per_s == pytest.approx(16 / (many.tpot_ms / 1000))
