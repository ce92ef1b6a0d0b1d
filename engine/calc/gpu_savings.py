"""What a technique of the later lessons saves on a data-centre GPU, by the datasheet floors.

Pure Python (no torch), from engine.calc.gpu_scaling's quoted shapes and machines; every time is
a floor (a real step reaches a fraction of either roof), never a measurement of a GPU.

    a prefix-cache hit saves    floor(S + O) - floor(O)   prefill floors of the whole prompt and
                                                          of the request's own part (S shared
                                                          tokens, O its own). At a short O the
                                                          own part still pays a full weight
                                                          read, so floor(S) alone overstates it.
    decode TPOT floor, batch B  (P x bits / 8 + B x c x KV bytes per token) / bandwidth, or
                                FLOPs / peak if larger: weights of `bits` bits each, a bf16 KV
                                cache (weight-only formats leave the cache and the arithmetic
                                as they are)
"""

from __future__ import annotations

from dataclasses import dataclass

from .gpu_scaling import Machine, ModelShape, prefill_floor_ms
from .step_cost import StepCost, decode_cost


def prefix_hit_saving_ms(model: ModelShape, machine: Machine, shared: int, own: int) -> float:
    """The prefill floor a cache hit on `shared` tokens removes from a request whose own part
    is `own` tokens: floor(shared + own) - floor(own)."""
    return (prefill_floor_ms(model, machine, shared + own)
            - prefill_floor_ms(model, machine, own))


@dataclass(frozen=True)
class WeightFormat:
    """How many bits a weight takes, and the example the lessons give of it."""

    name: str
    bits: int
    example: str


BF16 = WeightFormat("bf16", 16, "what GPUs serve unquantized")
EIGHT_BIT = WeightFormat("int8 or FP8", 8, "weight-only int8, or FP8 (W8A8)")
FOUR_BIT = WeightFormat("4-bit", 4, "GPTQ or AWQ weights run by a kernel such as MARLIN")
FORMATS: tuple[WeightFormat, ...] = (BF16, EIGHT_BIT, FOUR_BIT)


def weight_bytes(model: ModelShape, fmt: WeightFormat) -> float:
    """The model's weights in this format: parameters x bits / 8 (the scales left out)."""
    return model.params * fmt.bits / 8


def decode_cost_in(model: ModelShape, fmt: WeightFormat, batch: int, context: float) -> StepCost:
    """A decode step's FLOPs and bytes with the weights in `fmt` and the KV cache in bf16."""
    shape = {**model.as_shape(), "weight_bytes": weight_bytes(model, fmt)}
    return decode_cost(shape, batch, context)


def tpot_floor_ms(model: ModelShape, fmt: WeightFormat, machine: Machine, batch: int = 1,
                  context: float = 0.0) -> float:
    """The least time a decode step can take with the weights in `fmt`: max(bytes / bandwidth,
    FLOPs / peak) at the machine's bf16 peak."""
    return decode_cost_in(model, fmt, batch, context).floor_ms(machine.bandwidth_gbs,
                                                               machine.peak_gflops)
