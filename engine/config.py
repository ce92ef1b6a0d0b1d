"""Model presets and engine settings.

A preset fixes a model's shape; the engine settings fix how it is served (device, block size,
KV budget, attention backend). Both are plain dataclasses so they print, compare and hash.
Torch-free (dtypes by name; engine.device maps a name to a torch dtype), so the web process can
import the presets.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path

from .calc.experts import MoEShape, active_params
from .calc.kv_math import element_bytes, kv_bytes
from .errors import ConfigError

ASSETS = Path(__file__).resolve().parent.parent / "assets"
TINY_CHECKPOINT = ASSETS / "tiny" / "model.safetensors"
TOKENIZER_FILE = ASSETS / "tiny" / "tokenizer.json"
TRAINING_RECORD = ASSETS / "tiny" / "training.json"

# The names a run's settings take: batching policies (engine.scheduler) and workload kinds
# (engine.serve.workload), here so that torch-free code (the job registry, pages) can offer them.
POLICIES = ("static", "dynamic", "continuous")
WEIGHT_FORMATS = ("fp32", "int8")  # EngineConfig.weight_format
KV_DTYPES = ("auto", "fp8")  # EngineConfig.kv_dtype
WORKLOADS = ("poisson", "gamma", "fixed", "interference")


@dataclass(frozen=True)
class ModelConfig:
    """The shape of a Llama-family decoder (RMSNorm, rotary positions, GQA, SwiGLU)."""

    name: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    context: int
    weights: str  # "trained" (shipped checkpoint) or "random" (timing only)
    cuda_dtype: str = "bfloat16"
    cpu_dtype: str = "float32"  # bf16 matmul is unusably slow on CPUs without bf16 units
    rope_theta: float = 10000.0
    norm_eps: float = 1e-5
    # Mixture of experts (engine/model/moe.py): each layer's MLP is `experts` MLPs of the shape
    # above, of which a router picks `top_k` per token; 0 experts is a dense model.
    experts: int = 0
    top_k: int = 0
    # Hybrid attention: where > 0, every other layer from the first attends only to the last
    # sliding_window tokens (itself included), as Gemma 2 alternates local and global layers
    # (Gemma Team, arXiv:2408.00118) and Mistral 7B's layers use a window (arXiv:2310.06825)
    sliding_window: int = 0

    @property
    def windowed(self) -> tuple[bool, ...]:
        """Per layer, whether it attends to a sliding window (else to the whole context)."""
        return tuple(self.sliding_window > 0 and i % 2 == 0 for i in range(self.layers))

    def dtype_name(self, device: str) -> str:
        """The dtype the engine runs this model in on a device ("float32", "bfloat16", ...)."""
        return self.cuda_dtype if str(device).startswith("cuda") else self.cpu_dtype

    @property
    def params(self) -> int:
        """Parameter count; the output projection is tied to the token embedding."""
        attn = self.hidden * (self.heads + 2 * self.kv_heads) * self.head_dim
        attn += self.heads * self.head_dim * self.hidden
        mlp = 3 * self.hidden * self.intermediate * max(self.experts, 1)
        mlp += self.hidden * self.experts  # the router
        norms = 2 * self.hidden
        return self.layers * (attn + mlp + norms) + self.vocab * self.hidden + self.hidden

    @property
    def active_params(self) -> int:
        """Parameters one token's step multiplies by: every one of a dense model's, and of an
        MoE model all but the experts the router did not pick (calc.experts.active_params)."""
        return active_params(MoEShape.of(self))

    def kv_bytes_per_token(self, element_size: int) -> int:
        """2 (K and V) x layers x KV heads x head dim x bytes per element (calc.kv_math)."""
        return kv_bytes(self.layers, self.kv_heads, self.head_dim, element_size)

    def describe(self, device: str) -> dict:
        """The fields `python -m engine info` prints for a preset on a device."""
        size = element_bytes(self.dtype_name(device))
        return {
            "name": self.name,
            "params": self.params,
            "layers": self.layers,
            "hidden": self.hidden,
            "heads": self.heads,
            "kv_heads": self.kv_heads,
            "head_dim": self.head_dim,
            "intermediate": self.intermediate,
            "vocab": self.vocab,
            "context": self.context,
            "dtype": self.dtype_name(device),
            "weights": self.weights,
            "kv_bytes_per_token": self.kv_bytes_per_token(size),
            "weight_bytes": self.params * size,
        }


PRESETS: dict[str, ModelConfig] = {
    # Trained by `python -m engine.training` on assets/corpus; small enough to train on 2 CPU cores.
    "tiny": ModelConfig(
        name="tiny", layers=6, hidden=256, heads=8, kv_heads=2, head_dim=32,
        intermediate=768, vocab=4096, context=2048, weights="trained",
    ),
    # 32.5M parameters, 130 MB in float32: several times a server CPU's last-level cache (32 MiB
    # on this machine class), so its decode step reads DRAM as a large model's does. The default
    # of the lessons whose point is a memory-bound step; random weights, timing only.
    "mini": ModelConfig(
        name="mini", layers=8, hidden=512, heads=8, kv_heads=2, head_dim=64,
        intermediate=2048, vocab=4096, context=2048, weights="random",
    ),
    # About GPT-2-small size (128M parameters): the CPU timing model.
    "small": ModelConfig(
        name="small", layers=12, hidden=768, heads=12, kv_heads=4, head_dim=64,
        intermediate=3072, vocab=32000, context=2048, weights="random",
    ),
    # The shape of Llama-3.2-1B (1.2B parameters): the GPU timing model.
    "large": ModelConfig(
        name="large", layers=16, hidden=2048, heads=32, kv_heads=8, head_dim=64,
        intermediate=8192, vocab=128256, context=4096, weights="random",
        rope_theta=500000.0,
    ),
}


# Draft models for speculative decoding: trained like tiny, on the same corpus and tokenizer, but
# far cheaper per step. Kept apart from PRESETS, which are the models the lessons serve and list;
# get_preset finds both, so `--preset draft` still runs one on its own.
DRAFTS: dict[str, ModelConfig] = {
    "draft": ModelConfig(
        name="draft", layers=2, hidden=128, heads=4, kv_heads=2, head_dim=32,
        intermediate=384, vocab=4096, context=2048, weights="trained",
    ),
}


# Mixture-of-experts models (engine/model/moe.py) and the dense model of the same active size,
# for the experts lesson; random weights, timing only. Kept apart from PRESETS, as the drafts are,
# so the other lessons' lists and checks stay as they were; get_preset finds them.
EXPERT_PRESETS: dict[str, ModelConfig] = {
    # mini's attention with 16 experts of a quarter of mini's MLP each, top-2: 108M parameters
    # (413 MiB in float32, many times a 32 MiB last-level cache), 19.9M of them active per token.
    "moe-mini": ModelConfig(
        name="moe-mini", layers=8, hidden=512, heads=8, kv_heads=2, head_dim=64,
        intermediate=512, vocab=4096, context=2048, weights="random", experts=16, top_k=2,
    ),
    # The dense model of moe-mini's active size: one MLP as wide as its two picked experts
    # (equal active parameters but for the router's 8K per layer): 19.9M parameters, 76 MiB.
    "moe-mini-dense": ModelConfig(
        name="moe-mini-dense", layers=8, hidden=512, heads=8, kv_heads=2, head_dim=64,
        intermediate=1024, vocab=4096, context=2048, weights="random",
    ),
    # Tiny shapes for the tests: 4 experts, top-2, and the dense model of its active size.
    "moe-tiny": ModelConfig(
        name="moe-tiny", layers=2, hidden=64, heads=2, kv_heads=2, head_dim=32,
        intermediate=96, vocab=4096, context=512, weights="random", experts=4, top_k=2,
    ),
    "moe-tiny-dense": ModelConfig(
        name="moe-tiny-dense", layers=2, hidden=64, heads=2, kv_heads=2, head_dim=32,
        intermediate=192, vocab=4096, context=512, weights="random",
    ),
}


# Hybrid-attention models: kept apart from PRESETS (the lessons' models), found by get_preset.
HYBRIDS: dict[str, ModelConfig] = {
    # tiny's shape, its even layers windowed to 256 tokens; random weights: timing and memory
    "tiny-hybrid": ModelConfig(
        name="tiny-hybrid", layers=6, hidden=256, heads=8, kv_heads=2, head_dim=32,
        intermediate=768, vocab=4096, context=2048, weights="random", sliding_window=256,
    ),
}


def checkpoint_path(cfg: ModelConfig) -> Path:
    """Where a trained preset's weights are shipped: assets/<name>/model.safetensors."""
    return ASSETS / cfg.name / "model.safetensors"


def get_preset(name: str) -> ModelConfig:
    found = (PRESETS.get(name) or DRAFTS.get(name) or EXPERT_PRESETS.get(name)
             or HYBRIDS.get(name))
    if found is None:
        raise ConfigError(f"unknown preset {name!r}: choose one of {', '.join(PRESETS)} "
                          f"(or a draft model: {', '.join(DRAFTS)}; an experts model: "
                          f"{', '.join(EXPERT_PRESETS)}; a hybrid-attention model: "
                          f"{', '.join(HYBRIDS)})")
    return found


@dataclass
class EngineConfig:
    """How a model is served: device, paged-cache geometry, KV budget, attention backend."""

    preset: str = "tiny"
    device: str = "auto"  # "auto" picks CUDA when present, else CPU
    # "torch" | "cpp" | "triton" | "auto": triton on CUDA; on CPU cpp where its kernel builds,
    # else torch (engine/model/attention.py)
    backend: str = "auto"
    block_size: int = 16
    kv_budget_bytes: int | None = None  # None: a share of free memory (see model.kv_cache.default_budget)
    max_batch: int = 256  # most sequences one step may hold
    seed: int = 0
    cuda_graphs: bool = True  # capture decode steps in CUDA graphs on CUDA
    random_weights: bool = False  # tiny with random weights (for tests that need no real text)
    prefix_caching: bool = False  # keep full KV blocks under their prefix's hash (block_manager)
    # "fp32": the preset's own dtype; "int8": every linear layer's weight as int8 with per-row
    # scales, multiplied by an int8 kernel: C++ on the CPU, Triton on CUDA (engine/model/int8.py)
    weight_format: str = "fp32"
    # "auto": keys and values in the model's dtype; "fp8": float8 e4m3 with a float32 scale per
    # block and KV head (engine/model/fp8_kv.py), read by the torch attention path
    kv_dtype: str = "auto"
    # every row of a step computed alone, so tokens and logits do not depend on the batch or the
    # prefill chunking (engine/model/batch_invariant.py); costs about a batch-1 step per row
    batch_invariant: bool = False
    extra: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)
