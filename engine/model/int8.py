"""Weight-only int8: each output row of a linear layer's weight kept as int8 numbers and one
float32 scale, w ~= q * scale with q = round(w / scale) and scale = max |w| of the row / 127
(symmetric, per output channel, the scheme gpt-fast and torchao call weight-only int8).

Why: a decode step at a small batch reads every weight once, and int8 reads a quarter of
float32's bytes (and holds a quarter of the memory). Whether that makes the step faster depends on
what the step waits for. The kernels widen the int8 weights in registers as they multiply: on the
CPU csrc/int8_linear.cpp (float32 activations), on CUDA triton_int8.py (the activations' dtype;
tested in Triton's interpreter, not timed on a GPU here). On a 2-core AVX2 CPU the widening,
not memory, sets the C++ kernel's pace: int8's step is faster than float32's at batch 1 and 4
and about as fast at batch 16, well short of the 4x that the bytes alone promise, because the
kernel moves its bytes at a fraction of the bandwidth float32's step reaches
(`python bench/engine/techniques.py` measures both). Integer dot products (activations quantized too)
or a GPU would be needed to turn the whole byte saving into speed at batch 1. The cost is the
rounding: at most half a scale step per weight, which the quality check measures
(engine.quantization: held-out loss and next-token agreement against float32).
"""

from __future__ import annotations

import torch

# Up to this many rows (a decode step's batch) a product goes through the int8 kernel, which reads
# the int8 weights once for every row; more rows (a prefill) are compute-bound, and there the
# weight is widened to float32 once and multiplied by the library's own matmul.
KERNEL_ROWS = 32


def quantize_rows(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(q int8 (N, K), scale float32 (N,)) for a float weight (N, K); an all-zero row gets scale
    1 (its q is 0 either way)."""
    w = weight.detach().float()
    amax = w.abs().amax(dim=1)
    scale = torch.where(amax > 0, amax / 127.0, torch.ones_like(amax))
    q = torch.round(w / scale[:, None]).clamp_(-127, 127).to(torch.int8)
    return q.contiguous(), scale.contiguous()


def dequantize(q: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """The float32 weight the int8 one stands for: q * scale, row by row."""
    return q.float() * scale[:, None]


def int8_bytes(q: torch.Tensor, scale: torch.Tensor) -> int:
    """Bytes a product reads for the weight: one per weight plus four per row's scale."""
    return q.numel() * q.element_size() + scale.numel() * scale.element_size()
