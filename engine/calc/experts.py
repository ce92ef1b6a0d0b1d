"""Formulas of a mixture-of-experts decode step (engine/model/moe.py), shared by the engine's
experts measurement and the experts lesson. Torch-free.

A step reads, in every layer, the weights of each expert at least one of its tokens picked,
once; the rest of the model (attention, router, norms, the output projection) it reads whole.
So the weights one decode step reads are

    step weight bytes = (params - layers x E x expert params
                         + layers x distinct experts read x expert params) x bytes per weight

with expert params = 3 x hidden x intermediate (SwiGLU's gate, up and down). A dense model reads
all its params whatever the batch. Under a router that picks uniformly at random, B tokens each
picking k of E experts leave a given expert unpicked with probability (1 - k/E)^B, so the
expected distinct experts a layer reads is E x (1 - (1 - k/E)^B).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class MoEShape:
    """What the formulas read of a preset (engine.config.ModelConfig carries each field)."""

    params: int  # every parameter, all experts included (the tied table once)
    layers: int
    hidden: int
    intermediate: int  # one expert's MLP width
    experts: int  # 0: a dense model
    top_k: int

    @classmethod
    def of(cls, cfg) -> MoEShape:
        """The shape of a ModelConfig (or anything with its fields)."""
        return cls(cfg.params, cfg.layers, cfg.hidden, cfg.intermediate, cfg.experts, cfg.top_k)

    @property
    def expert_params(self) -> int:
        """One expert's parameters: SwiGLU's gate, up and down matrices."""
        return 3 * self.hidden * self.intermediate

    @property
    def shared_params(self) -> int:
        """The parameters every step reads whatever its tokens pick: all but the experts."""
        return self.params - self.layers * self.experts * self.expert_params


def expected_distinct(experts: int, top_k: int, batch: int) -> float:
    """Expected distinct experts a layer reads for `batch` tokens under a uniform router:
    E x (1 - (1 - k/E)^B). Batch 1 gives k; a large batch approaches E."""
    if experts == 0:
        return 0.0
    return experts * (1.0 - (1.0 - top_k / experts) ** batch)


def step_weight_bytes(shape: MoEShape, distinct: float, bytes_per_weight: int) -> float:
    """Weight bytes one decode step reads when each layer reads `distinct` experts (the mean
    over layers); a dense model's (experts 0) is all its params whatever `distinct` is."""
    if shape.experts == 0:
        return float(shape.params * bytes_per_weight)
    read = shape.shared_params + shape.layers * distinct * shape.expert_params
    return read * bytes_per_weight


def active_params(shape: MoEShape) -> int:
    """Parameters one token multiplies by: all but the experts it did not pick."""
    if shape.experts == 0:
        return shape.params
    return shape.shared_params + shape.layers * shape.top_k * shape.expert_params


def weight_floor_ms(params: float, bytes_per_weight: float, bandwidth_gbs: float) -> float:
    """The least time a step reading `params` weights can take: their bytes / the bandwidth."""
    return params * bytes_per_weight / bandwidth_gbs / 1e6
