"""An FP8 (e4m3) KV cache: keys and values stored as float8_e4m3fn with a float32 scale per
block and KV head, quantized as they are appended and dequantized as attention reads them.

e4m3 keeps 3 mantissa bits and reaches +-448 (the OCP 8-bit floating point specification, the
format NVIDIA's Hopper tensor cores and vLLM's `--kv-cache-dtype fp8` use). Each (block, head)
stores x / scale, with scale = amax / 448 over every value written to that block and head so
far, so the largest value lands on the format's largest. A token appended to a block whose
values it exceeds raises the block's scale, and the block's stored values are re-cast to the new
scale (a second rounding for them, never an overflow). A token written at offset 0 starts its
block afresh: a block handed out again never inherits its last holder's scale.

Error bound of one quantization, per element x of a (block, head) of scale s: a normal e4m3
number carries 3 mantissa bits, so rounding moves it by at most 2^-4 of its value; below the
smallest normal (2^-6 s) the spacing is 2^-9 s, so rounding moves it by at most 2^-10 s.
Hence |x - dequant(quant(x))| <= max(2^-4 |x|, 2^-10 s).
"""

from __future__ import annotations

import torch

FP8 = torch.float8_e4m3fn
FP8_MAX = torch.finfo(FP8).max  # 448
# Scales never reach 0 (a block of zeros would divide by it); far below any real activation.
MIN_SCALE = 1e-12
SCALE_BYTES = 4  # float32


def quantize(x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """x (..., D) as e4m3 of x / scale, scale broadcast over the last dimension."""
    return (x.float() / scale[..., None]).clamp(-FP8_MAX, FP8_MAX).to(FP8)


def dequantize(q: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The values q * scale in dtype; scale broadcast over the last dimension."""
    return (q.float() * scale[..., None]).to(dtype)


class Fp8Layer:
    """One layer's fp8 block pool (blocks, block_size, kv_heads, head_dim) with its scales
    (blocks, kv_heads), read as if it were a pool in the model's dtype: attention gathers blocks
    with `index_select(0, block_ids)` and gets them dequantized (engine/model/attention.py's
    gather_context), so the torch attention path reads it unchanged."""

    def __init__(self, data: torch.Tensor, scales: torch.Tensor, dtype: torch.dtype):
        self.data, self.scales, self.dtype = data, scales, dtype
        self.shape = data.shape
        self.device = data.device

    def index_select(self, dim: int, ids: torch.Tensor) -> torch.Tensor:
        if dim != 0:
            raise ValueError("an fp8 pool is gathered by block (dim 0)")
        blocks = self.data.view(torch.uint8).index_select(0, ids).view(FP8)
        scales = self.scales.index_select(0, ids)  # (n, kv_heads)
        return dequantize(blocks, scales[:, None, :], self.dtype)

    def dequantized(self) -> torch.Tensor:
        """The whole pool in the model's dtype (for tests and small pools)."""
        return dequantize(self.data, self.scales[:, None, :], self.dtype)

    def write(self, slots: torch.Tensor, x: torch.Tensor) -> None:
        """Append tokens x (T, kv_heads, head_dim) at slots (T,): each touched block's scale
        becomes the largest of its old scale (0 for a block started by this write) and the new
        tokens' amax / 448; blocks whose scale grew are re-cast; then the tokens are cast."""
        block_size = self.data.shape[1]
        blocks = torch.div(slots, block_size, rounding_mode="floor")
        touched, inverse = torch.unique(blocks, return_inverse=True)
        heads = x.shape[1]
        amax = x.abs().amax(-1).float()  # (T, kv_heads)
        new_amax = torch.zeros(len(touched), heads, device=x.device).scatter_reduce_(
            0, inverse[:, None].expand(-1, heads), amax, "amax")
        starts = torch.zeros(len(touched), dtype=torch.int32, device=x.device).scatter_reduce_(
            0, inverse, (slots % block_size == 0).int(), "amax").bool()
        old = torch.where(starts[:, None], 0.0, self.scales.index_select(0, touched))
        new = torch.maximum(old, new_amax / FP8_MAX).clamp_min(MIN_SCALE)
        grown = ((new > old) & (old > 0)).any(1)
        if bool(grown.any()):
            ids = touched[grown]
            old_values = self.data.view(torch.uint8).index_select(0, ids).view(FP8)
            recast = quantize(dequantize(old_values, old[grown][:, None, :], torch.float32),
                              new[grown][:, None, :])
            self.data.view(torch.uint8).index_copy_(0, ids, recast.view(torch.uint8))
        self.scales.index_copy_(0, touched, new)
        flat = self.data.view(torch.uint8).view(-1, heads, x.shape[2])
        flat.index_copy_(0, slots, quantize(x, new[inverse]).view(torch.uint8))
