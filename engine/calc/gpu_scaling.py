"""What a lesson's finding becomes on a data-centre GPU: public specs and the formulas applied.

Pure Python (no torch). Every figure here is either quoted with its source (a GPU's datasheet, a
model's published configuration) or computed from quoted and measured figures by the formulas
below; none is a measurement of a GPU. Where the app runs on a GPU, the pages put that GPU's
measured bandwidth and peak (the engine's `info` job) through the same formulas.

    ridge point (FLOP/byte)        = peak FLOP/s / memory bandwidth (bytes/s)
    decode step, batch B, context c: FLOPs and bytes from engine.calc.step_cost.decode_cost
                                     (weights read once per step, each sequence's KV read)
    step floor (ms)                = max(bytes / bandwidth, FLOPs / peak)
    the bend                       = the smallest batch whose decode step reaches the ridge
    KV capacity (sequences)        = (memory - weight bytes) / (c x KV bytes per token)
    prefill floor (ms)             = max(2 x P x L / peak, weight bytes / bandwidth)

Peaks are dense bf16 tensor-core figures (the datasheets' headline numbers with 2:4 sparsity are
twice these); a real step reaches a fraction of either roof, so every time here is a floor.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from .kv_math import kv_bytes_per_token
from .step_cost import StepCost, decode_cost, ridge_point

BF16_BYTES = 2


@dataclass(frozen=True)
class Machine:
    """A device's two limits: memory bandwidth and matrix-multiply peak."""

    name: str
    bandwidth_gbs: float
    peak_gflops: float
    memory_gb: float | None = None
    source: str = ""  # where the figures come from ("measured here by the engine" for ours)
    measured: bool = False

    @property
    def ridge(self) -> float:
        """FLOP per byte where the roofs meet: peak / bandwidth."""
        return ridge_point(self.bandwidth_gbs, self.peak_gflops)


A100 = Machine(
    "NVIDIA A100 80GB SXM", bandwidth_gbs=2039.0, peak_gflops=312_000.0, memory_gb=80.0,
    source="NVIDIA A100 Tensor Core GPU datasheet: 2,039 GB/s HBM2e; BF16 Tensor Core "
           "312 TFLOPS dense (624 with sparsity)")
H100 = Machine(
    "NVIDIA H100 SXM", bandwidth_gbs=3350.0, peak_gflops=989_500.0, memory_gb=80.0,
    source="NVIDIA H100 Tensor Core GPU datasheet: 3.35 TB/s HBM3; BF16 Tensor Core "
           "1,979 TFLOPS with sparsity, half that (989.5) dense")
GPUS: tuple[Machine, ...] = (A100, H100)


@dataclass(frozen=True)
class ModelShape:
    """The parts of a public model's shape these formulas need (quoted, bf16 weights)."""

    name: str
    params: float
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    source: str

    @property
    def weight_bytes(self) -> float:
        return self.params * BF16_BYTES

    @property
    def kv_bytes_per_token(self) -> int:
        return kv_bytes_per_token(self.layers, self.kv_heads, self.head_dim, "bf16")

    def as_shape(self) -> dict:
        """The dict engine.calc.step_cost takes."""
        return {"params": self.params, "weight_bytes": self.weight_bytes,
                "kv_bytes_per_token": self.kv_bytes_per_token, "heads": self.heads,
                "head_dim": self.head_dim, "layers": self.layers}


LLAMA_3_8B = ModelShape(
    "Llama-3-8B", params=8.03e9, layers=32, heads=32, kv_heads=8, head_dim=128,
    source="its published config.json and model card (meta-llama/Meta-Llama-3-8B on Hugging "
           "Face): 8.03 B parameters, 32 layers, 32 query heads, 8 KV heads of 128")


def machine_from_info(info: dict) -> Machine:
    """This machine's measured limits, from the engine's `info` result."""
    return Machine(info.get("device_name") or info.get("device", "this machine"),
                   bandwidth_gbs=float(info["memory_bandwidth_gbs"]),
                   peak_gflops=float(info["matmul_gflops"]),
                   source="measured here by the engine (info)", measured=True)


def on_gpu(info: dict) -> bool:
    """Whether the engine runs on a GPU (then the pages show its own measured numbers)."""
    return str(info.get("device", "")).startswith("cuda")


def decode_step(model: ModelShape, batch: int, context: float) -> StepCost:
    return decode_cost(model.as_shape(), batch, context)


def step_floor_ms(cost: StepCost, machine: Machine) -> float:
    """The least time a step can take: max(bytes / bandwidth, FLOPs / peak)."""
    return cost.floor_ms(machine.bandwidth_gbs, machine.peak_gflops)


@lru_cache(maxsize=256)
def bend_batch(model: ModelShape, machine: Machine, context: float,
               limit: int = 4096) -> int | None:
    """The smallest decode batch whose arithmetic intensity reaches the machine's ridge point,
    or None when no batch up to `limit` does (each sequence's KV reads keep the step
    memory-bound however large the batch).

    Kept per (model, machine, context, limit), all frozen values: the search costs up to `limit`
    step costs (4096 for a "never"), and lesson 4's "On a GPU" box asks four of them for every
    reader's page, built on the web server's one core while a class arrives."""
    for batch in range(1, limit + 1):
        if decode_step(model, batch, context).intensity >= machine.ridge:
            return batch
    return None


def intensity_ceiling(model: ModelShape, context: float) -> float:
    """What decode intensity tends to as the batch grows: per sequence, 2 x P FLOPs (plus
    attention) over its c x KV bytes of cache; weights shared by the whole batch no longer
    count."""
    one = decode_step(model, 1, context)
    kv = context * model.kv_bytes_per_token
    return one.flops / kv


def kv_capacity(model: ModelShape, machine: Machine, context: float) -> int | None:
    """Sequences of `context` tokens whose bf16 KV cache fits beside the weights (None if the
    machine's memory is unknown)."""
    if machine.memory_gb is None:
        return None
    free = machine.memory_gb * 1e9 - model.weight_bytes
    return max(0, int(free // (context * model.kv_bytes_per_token)))


def largest_batch_within(model: ModelShape, machine: Machine, context: float,
                         tpot_limit_ms: float) -> int | None:
    """The largest batch whose decode step's floor stays within a TPOT limit, among the batches
    the machine's KV memory holds at this context (4,096 where it does not say); None when even
    batch 1 is over the limit. The step's floor grows with the batch, so the search stops at
    the first batch over it."""
    best = None
    for b in range(1, (kv_capacity(model, machine, context) or 4096) + 1):
        if step_floor_ms(decode_step(model, b, context), machine) > tpot_limit_ms:
            break
        best = b
    return best


def decode_tokens_per_s(model: ModelShape, machine: Machine, context: float, batch: int) -> float:
    """The output tokens per second a batch could produce at most: a token per sequence each
    decode step, at the step's floor."""
    return batch * 1000 / step_floor_ms(decode_step(model, batch, context), machine)


def prefill_floor_ms(model: ModelShape, machine: Machine, tokens: int) -> float:
    """The least time one prefill pass over `tokens` prompt tokens can take:
    max(2 x P x L / peak, weight bytes / bandwidth) (attention's own FLOPs left out)."""
    compute = 2.0 * model.params * tokens / (machine.peak_gflops * 1e9)
    memory = model.weight_bytes / (machine.bandwidth_gbs * 1e9)
    return 1000 * max(compute, memory)


def compute_bound_prompt(model: ModelShape, machine: Machine) -> float:
    """Prompt length above which a prefill pass is compute-bound: its intensity
    (2 x P x L / (P x 2 bytes) = L FLOP/byte in bf16) passes the ridge."""
    return machine.ridge * model.weight_bytes / (2.0 * model.params)
