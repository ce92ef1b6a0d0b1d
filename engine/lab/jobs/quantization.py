"""Jobs for the quantization lesson, each against the same engine with float32 weights:

- `int8_point`: one batch size of the sweep (engine.sweep) on an engine whose weights are fp32
  or int8 (EngineConfig.weight_format): TPOT, the weight bytes a step reads, bytes per step.
- `int8_quality`: the trained tiny model loaded twice, fp32 and int8, scored on the corpus's
  held-out windows (engine.quantization): the loss of each, and how often they agree on the
  next token.
"""

from __future__ import annotations

from ...quantization import int8_quality
from ..control import Control
from ..registry import Emit
from .engines import engine_from_params
from .measure import measure_sweep_point


def int8_point_job(params: dict, emit: Emit, control: Control) -> dict | None:
    """One batch size of the sweep with the weights given."""
    engine = engine_from_params(params)  # with the weights in the format asked
    point = measure_sweep_point(engine, params, emit, control)
    return None if point is None else {**point, "weight_format": params["weight_format"]}


def int8_quality_job(params: dict, emit: Emit, control: Control) -> dict | None:
    """fp32 against int8 on the held-out windows (a few seconds on tiny)."""
    emit("progress", {"done": 0, "total": 1, "message": "scoring both models"})
    quality = int8_quality(params["preset"], params["windows"], params["seq_len"])
    emit("progress", {"done": 1, "total": 1, "message": "scoring both models"})
    return {"device": "cpu", **quality.to_json()}
