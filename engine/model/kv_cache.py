"""The paged KV cache: one pool of fixed-size blocks per layer, for keys and for values.

Layout per layer: (num_blocks, block_size, kv_heads, head_dim). A token's K and V live at a
"slot" = block_id * block_size + offset; a sequence's block table lists its blocks in order.
"""

from __future__ import annotations

import os

import torch

from ..config import ModelConfig
from ..errors import ConfigError

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
                 dtype: torch.dtype, device: str):
        self.block_size = block_size
        self.dtype = dtype
        self.bytes_per_token = cfg.kv_bytes_per_token(dtype.itemsize)
        self.bytes_per_block = self.bytes_per_token * block_size
        self.num_blocks = budget_bytes // self.bytes_per_block
        if self.num_blocks < 1:
            raise ConfigError(
                f"KV budget of {budget_bytes} bytes holds no block of {block_size} tokens "
                f"({self.bytes_per_block} bytes per block)"
            )
        shape = (cfg.layers, self.num_blocks, block_size, cfg.kv_heads, cfg.head_dim)
        # Zeros, not empty: masked-out slots are multiplied by 0, and 0 * NaN garbage is NaN.
        self.k = torch.zeros(shape, dtype=dtype, device=device)
        self.v = torch.zeros(shape, dtype=dtype, device=device)
        # Each layer's pools as views made once: taking k[layer] and flattening it in every
        # layer of every step would be four op calls per layer (a few microseconds each).
        self.k_layers, self.v_layers = list(self.k.unbind(0)), list(self.v.unbind(0))
        rows = (cfg.layers, self.num_blocks * block_size, cfg.kv_heads, cfg.head_dim)
        self._k_slots = list(self.k.view(rows).unbind(0))  # (slots, kv_heads, head_dim)
        self._v_slots = list(self.v.view(rows).unbind(0))

    @property
    def capacity_tokens(self) -> int:
        return self.num_blocks * self.block_size

    @property
    def allocated_bytes(self) -> int:
        """What the pools really occupy, counted from the tensors themselves."""
        return self.k.numel() * self.k.element_size() + self.v.numel() * self.v.element_size()

    def write(self, layer: int, slots: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        """Store new tokens' K and V (T, kv_heads, head_dim) at their slots."""
        if k.dtype != self.dtype:  # a cache narrower than the model (no op call otherwise)
            k, v = k.to(self.dtype), v.to(self.dtype)
        self._k_slots[layer].index_copy_(0, slots, k)
        self._v_slots[layer].index_copy_(0, slots, v)
