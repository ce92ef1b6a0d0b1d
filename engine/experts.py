"""The experts measurement: one batch size of the sweep (engine.sweep) on an MoE or a dense
model, with the distinct experts each decode step read.

After every timed decode step each MoE layer tells how many distinct experts its tokens picked
(engine/model/moe.py); the point reports the mean over steps and layers, the mean of each layer,
the uniform router's expectation beside it, and the weight bytes a step read from the measured
count (engine.calc.experts.step_weight_bytes). Bytes and FLOPs per step are those of the experts
read (a sweep point's own count every expert). A dense model reads no experts: its counts are 0
and its bytes are all its weights at any batch.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import asdict, dataclass

from .calc.experts import MoEShape, active_params, expected_distinct, step_weight_bytes
from .calc.step_cost import decode_context, decode_cost
from .llm_engine import LLMEngine
from .model.moe import experts_read
from .sweep import WARMUP_STEPS, SweepPoint, measure_point


@dataclass
class ExpertsPoint:
    """A sweep point with what its decode steps read of the experts."""

    point: SweepPoint
    experts: int
    top_k: int
    active_params: int
    total_params: int
    experts_read: float  # distinct experts per layer per timed step, the mean
    experts_read_layers: list[float]  # each layer's mean over the timed steps
    experts_read_steps: list[float]  # each timed step's mean over layers
    expected_experts: float  # a uniform router's E x (1 - (1 - k/E)^B)
    step_weight_bytes: int  # from the measured count (calc.experts.step_weight_bytes)

    def to_dict(self) -> dict:
        out = asdict(self)
        return {**out.pop("point"), **out}


def measure_experts_point(engine: LLMEngine, batch_size: int, prompt_len: int = 128,
                          new_tokens: int = 32, seed: int = 0,
                          on_step: Callable[[int, int], None] | None = None,
                          cancelled: Callable[[], bool] | None = None) -> ExpertsPoint | None:
    """measure_point, reading the experts each decode step read; None if cancelled."""
    reads: list[list[int]] = []

    def after_step(done: int, total: int) -> None:
        reads.append(experts_read(engine.model))
        if on_step:
            on_step(done, total)

    point = measure_point(engine, batch_size, prompt_len, new_tokens, seed,
                          on_step=after_step, cancelled=cancelled)
    if point is None:
        return None
    cfg = engine.model_config
    shape = MoEShape.of(cfg)
    timed = reads[WARMUP_STEPS:]
    layers = [statistics.fmean(step[i] for step in timed) for i in range(len(timed[0]))] \
        if timed and timed[0] else []
    steps = [statistics.fmean(step) if step else 0.0 for step in timed]
    mean = statistics.fmean(steps) if steps else 0.0
    weight_bytes = step_weight_bytes(shape, mean, engine.model.embed.weight.element_size())
    cost = decode_cost({"params": active_params(shape), "heads": cfg.heads,
                        "head_dim": cfg.head_dim, "layers": cfg.layers,
                        "weight_bytes": weight_bytes,
                        "kv_bytes_per_token": engine.cache.bytes_per_token},
                       batch_size, decode_context(prompt_len, new_tokens))
    point.bytes_per_step = int(cost.bytes)
    point.achieved_gbs = cost.bytes / (point.tpot_ms / 1000) / 1e9
    point.flops_per_step = cost.flops
    return ExpertsPoint(
        point=point, experts=cfg.experts, top_k=cfg.top_k, active_params=active_params(shape),
        total_params=cfg.params, experts_read=mean, experts_read_layers=layers,
        experts_read_steps=steps,
        expected_experts=expected_distinct(cfg.experts, cfg.top_k, batch_size),
        step_weight_bytes=int(weight_bytes))
