"""The experts formulas (engine.calc.experts): a uniform router's expected distinct experts, and
the weight bytes a step reads, against a simulation and the model's own weights."""

from __future__ import annotations

import random

import pytest

from engine.calc.experts import MoEShape, active_params, expected_distinct, step_weight_bytes
from engine.config import get_preset
from engine.model.model import LlamaModel


def test_expected_distinct_runs_from_k_to_all_experts():
    assert expected_distinct(16, 2, 1) == pytest.approx(2.0)
    curve = [expected_distinct(16, 2, b) for b in (1, 2, 4, 8, 16, 32, 64, 256)]
    assert curve == sorted(curve) and curve[-1] == pytest.approx(16.0, abs=1e-6)
    assert expected_distinct(0, 0, 8) == 0.0


@pytest.mark.parametrize("experts, k, batch", [(16, 2, 4), (8, 2, 3), (16, 4, 16)])
def test_expected_distinct_matches_a_simulated_uniform_router(experts, k, batch):
    rng = random.Random(experts * 100 + batch)
    trials = 4000
    seen = sum(len({e for _ in range(batch) for e in rng.sample(range(experts), k)})
               for _ in range(trials)) / trials
    assert seen == pytest.approx(expected_distinct(experts, k, batch), rel=0.02)


@pytest.mark.parametrize("name", ["moe-tiny", "moe-mini-dense"])
def test_step_bytes_reading_every_expert_are_the_models_weights(name):
    cfg = get_preset(name)
    model_bytes = LlamaModel(cfg).weight_bytes()  # float32, every expert
    shape = MoEShape.of(cfg)
    assert step_weight_bytes(shape, cfg.experts, 4) == model_bytes
    if cfg.experts:  # top_k experts a layer: the active parameters' bytes
        assert step_weight_bytes(shape, cfg.top_k, 4) == active_params(shape) * 4
        assert step_weight_bytes(shape, cfg.top_k, 4) < model_bytes
    else:  # dense: flat at any count
        assert step_weight_bytes(shape, 0, 4) == step_weight_bytes(shape, 5, 4) == model_bytes
