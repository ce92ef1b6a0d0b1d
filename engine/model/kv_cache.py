"""The paged KV cache: one pool of fixed-size blocks per layer, for keys and for values.

Layout per layer: (num_blocks, block_size, kv_heads, head_dim). A token's K and V live at a
"slot" = block_id * block_size + offset; a sequence's block table lists its blocks in order.
With kv_dtype "fp8" the pools hold float8 e4m3 with a float32 scale per block and KV head
(fp8_kv.py): a block's bytes are its elements plus its scales, so a budget holds a little under
4x the tokens of float32 (2x bf16).
A hybrid-attention model (ModelConfig.sliding_window) has as many window layers as full ones:
the pool holds half the layers per block, and a block serves either group (a full layer and
the window layer before it share one pool, through different block tables: block_manager.py).
"""

from __future__ import annotations

import os

import torch

from ..config import ModelConfig
from ..errors import ConfigError
from .fp8_kv import FP8, SCALE_BYTES, Fp8Layer

# Budget when none is given: a share of what is free, capped so a laptop stays usable. On a CPU,
# 1 GiB holds 350k tokens of tiny or 43k of small: far more than the lessons' batches need, and
# the pool is zero-filled up front, so a larger default would only cost memory and start-up time.
CPU_BUDGET_SHARE, CPU_BUDGET_CAP = 0.25, 2**30
CUDA_BUDGET_SHARE = 0.6


def available_memory_bytes(device: str) -> int:
    """Free memory on the device (GPU: after what is already allocated; CPU: MemAvailable)."""
    if str(device).startswith("cuda"):
        free, _total = torch.cuda.mem_get_info()
        return free
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")


def default_budget(device: str) -> int:
    """A sensible KV budget: a quarter of free RAM (at most 1 GiB) on CPU, 60% of free GPU memory."""
    free = available_memory_bytes(device)
    if str(device).startswith("cuda"):
        return int(free * CUDA_BUDGET_SHARE)
    return int(min(free * CPU_BUDGET_SHARE, CPU_BUDGET_CAP))


class PagedKVCache:
    """Preallocated K and V block pools for every layer, sized by a byte budget."""

    def __init__(self, cfg: ModelConfig, budget_bytes: int, block_size: int,
                 dtype: torch.dtype, device: str, kv_dtype: str = "auto"):
        self.block_size = block_size
        self.dtype = dtype  # what attention reads: the model's dtype, or a narrower float
        self.fp8 = kv_dtype == "fp8"
        stored = FP8 if self.fp8 else dtype
        self.windowed = cfg.windowed  # per layer: a sliding-window layer
        self.window = cfg.sliding_window
        if self.window and cfg.layers % 2:
            raise ConfigError(f"a hybrid model alternates window and full layers: "
                              f"{cfg.layers} layers is odd")
        pool_layers = cfg.layers // 2 if self.window else cfg.layers
        # bytes of one block's token: its group's layers (all of them without a window)
        self.bytes_per_token = cfg.kv_bytes_per_token(stored.itemsize) * pool_layers // cfg.layers
        # fp8: a float32 scale per block, layer, KV head, for K and for V
        self.scale_bytes_per_block = 2 * pool_layers * cfg.kv_heads * SCALE_BYTES if self.fp8 else 0
        self.bytes_per_block = self.bytes_per_token * block_size + self.scale_bytes_per_block
        self.num_blocks = budget_bytes // self.bytes_per_block
        if self.num_blocks < 1:
            raise ConfigError(
                f"KV budget of {budget_bytes} bytes holds no block of {block_size} tokens "
                f"({self.bytes_per_block} bytes per block)"
            )
        shape = (pool_layers, self.num_blocks, block_size, cfg.kv_heads, cfg.head_dim)
        # Zeros, not empty: masked-out slots are multiplied by 0, and 0 * NaN garbage is NaN.
        self.k = torch.zeros(shape, dtype=stored, device=device)
        self.v = torch.zeros(shape, dtype=stored, device=device)
        # Each layer's pools as views made once: taking k[layer] and flattening it in every
        # layer of every step would be four op calls per layer (a few microseconds each).
        self.k_layers, self.v_layers = list(self.k.unbind(0)), list(self.v.unbind(0))
        rows = (pool_layers, self.num_blocks * block_size, cfg.kv_heads, cfg.head_dim)
        self._k_slots = list(self.k.view(rows).unbind(0))  # (slots, kv_heads, head_dim)
        self._v_slots = list(self.v.view(rows).unbind(0))
        self.k_scales = self.v_scales = None
        if self.fp8:
            scales = (pool_layers, self.num_blocks, cfg.kv_heads)
            self.k_scales = torch.zeros(scales, dtype=torch.float32, device=device)
            self.v_scales = torch.zeros(scales, dtype=torch.float32, device=device)
            # attention reads these as it reads float pools, dequantized as they are gathered
            self.k_layers = [Fp8Layer(d, s, dtype) for d, s in
                             zip(self.k.unbind(0), self.k_scales.unbind(0), strict=True)]
            self.v_layers = [Fp8Layer(d, s, dtype) for d, s in
                             zip(self.v.unbind(0), self.v_scales.unbind(0), strict=True)]
        if self.window:  # layer i reads pool i // 2: layers 2j (window) and 2j + 1 (full)
            for pools in ("k_layers", "v_layers", "_k_slots", "_v_slots"):
                views = getattr(self, pools)
                setattr(self, pools, [views[i // 2] for i in range(cfg.layers)])

    @property
    def capacity_tokens(self) -> int:
        return self.num_blocks * self.block_size

    @property
    def allocated_bytes(self) -> int:
        """What the pools really occupy, counted from the tensors themselves."""
        tensors = [self.k, self.v] + ([self.k_scales, self.v_scales] if self.fp8 else [])
        return sum(t.numel() * t.element_size() for t in tensors)

    def write(self, layer: int, slots: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        """Store new tokens' K and V (T, kv_heads, head_dim) at their slots."""
        if self.fp8:
            self.k_layers[layer].write(slots, k)
            self.v_layers[layer].write(slots, v)
            return
        if k.dtype != self.dtype:  # a cache narrower than the model (no op call otherwise)
            k, v = k.to(self.dtype), v.to(self.dtype)
        self._k_slots[layer].index_copy_(0, slots, k)
        self._v_slots[layer].index_copy_(0, slots, v)
