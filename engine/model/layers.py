"""Building blocks of the decoder: RMSNorm, rotary embedding, and a linear layer that picks how
to multiply by batch size (and may hold its weight as int8: engine/model/int8.py).

Why it matters: a decode step multiplies a few rows of activations by every weight matrix, so
its speed is how fast the weights stream from memory, and on CPUs that depends on how the
product is laid out (engine/model/matmul_plan.py measures the choices once per machine). A layer
keeps its weight in a second, transposed layout only where its plan multiplies by it ("x_wt"):
the copy is as big as the weight, and making it was most of a model's build once the plan is on
disk, and it doubles what the engine worker holds for the model; where the C++ library is built
no plan offers that layout (the one-call decode step reads the weights as they are).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from . import int8
from .matmul_plan import STEP_PRODUCTS, multiply, split_transposed


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))
        # The C++ add_rms_norm (cpu_kernel.fused_layer_ops), set by LlamaModel.use_fused_ops.
        self.fused_add = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """One fused op (normalized in fp32 when the model runs in half precision)."""
        if x.dtype == torch.float32:
            return F.rms_norm(x, (x.shape[-1],), self.weight, self.eps)
        normed = F.rms_norm(x.float(), (x.shape[-1],), None, self.eps)
        return self.weight * normed.to(x.dtype)

    def add_forward(self, x: torch.Tensor, residual: torch.Tensor):
        """(x + residual, its norm): the residual stream after a block's output is added, and the
        next block's input; one C++ call where the fused ops are in use, else two ops."""
        if self.fused_add is not None:
            return self.fused_add(x, residual, self.weight, self.eps)
        x = x + residual
        return x, self(x)


class Linear(nn.Module):
    """y = x @ W.T without bias; on CPU, with a measured plan for how to multiply few rows, or
    with W held as int8 rows and scales, multiplied by an int8 kernel (C++ on the CPU, Triton
    on CUDA)."""

    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.in_features = in_features
        self.out_features = out_features
        self.weight = nn.Parameter(torch.empty(out_features, in_features))
        self.weight_t: torch.Tensor | None = None  # split_transposed copy, where a plan has "x_wt"
        self.plan: list[str] | None = None  # variant for 1..MAX_TUNED_ROWS rows (rows_plan)
        self.qweight: torch.Tensor | None = None  # int8 (out, in), with self.scale: quantize_int8
        self.scale: torch.Tensor | None = None
        self.int8_kernel = None

    def prepare_for_cpu_decode(self, plan: list[str]) -> None:
        """Follow the measured plan (engine/model/matmul_plan.py), with the weight's transposed
        copy cut in pieces kept (made if need be) where the plan multiplies by it, else let go."""
        if "x_wt" not in plan:
            self.weight_t = None
        elif self.weight_t is None:
            self.weight_t = split_transposed(self.weight.detach())
        self.plan = plan

    def quantize_int8(self, kernel) -> None:
        """Hold the weight as int8 rows and scales (int8.quantize_rows) and multiply with
        `kernel` (llm_engine.int8_kernel_for); the float weight is let go (a tied one stays
        with the embedding, which looks rows up in it)."""
        self.qweight, self.scale = int8.quantize_rows(self.weight)
        self.int8_kernel = kernel
        self.weight = None
        self.weight_t = self.plan = None

    def step_product(self, rows: int) -> int | None:
        """The code of the layout the plan picks for `rows` rows, as the C++ one-call decode step
        takes it (matmul_plan.STEP_PRODUCTS), or None where that step cannot run it (no plan,
        more rows than it covers, or a layout that reads a transposed copy)."""
        if self.plan is None or rows > len(self.plan):
            return None
        return STEP_PRODUCTS.get(self.plan[rows - 1])

    def weight_bytes(self) -> int:
        """Bytes one product reads for the weight, as held."""
        if self.qweight is not None:
            return int8.int8_bytes(self.qweight, self.scale)
        return self.weight.numel() * self.weight.element_size()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.plan is None and self.qweight is None:
            return F.linear(x, self.weight)
        flat = x.dim() == 2  # the engine's flattened steps: no reshapes (each is an op call)
        rows = x if flat else x.reshape(-1, self.in_features)
        count = rows.shape[0]
        if self.qweight is not None:
            if count <= int8.KERNEL_ROWS:
                out = self.int8_kernel(rows, self.qweight, self.scale)
            else:  # a prefill: widen once, then the library's matmul (compute-bound anyway)
                out = F.linear(rows, int8.dequantize(self.qweight, self.scale).to(rows.dtype))
        elif count <= len(self.plan):
            out = multiply(rows, self.weight, self.weight_t, self.plan[count - 1])
        else:  # many rows (prefill): compute-bound, the library's own choice
            out = F.linear(rows, self.weight)
        return out if flat else out.reshape(*x.shape[:-1], self.out_features)


class Rotary(nn.Module):
    """Rotary position embedding (the rotate-half form used by Llama).

    With x = [x1, x2] (two halves of the head dimension), rotation by angle t is
    [x1 cos t - x2 sin t, x2 cos t + x1 sin t] = x * [cos, cos] + roll(x, half) * [-sin, sin],
    which is three tensor ops (a roll, a product, and a fused multiply-add). The angles depend only on the positions, so a step looks them
    up once (`angles`) and every layer applies them to q and k (`apply`)."""

    def __init__(self, head_dim: int, context: int, theta: float):
        super().__init__()
        inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
        angles = torch.outer(torch.arange(context, dtype=torch.float32), inv_freq)
        # Stored (context, 1, head_dim): a position's row already broadcasts over heads.
        self.register_buffer("cos", torch.cat([angles.cos()] * 2, -1)[:, None],
                             persistent=False)
        self.register_buffer("sin", torch.cat([-angles.sin(), angles.sin()], -1)[:, None],
                             persistent=False)

    def angles(self, positions: torch.Tensor, dtype: torch.dtype):
        """(cos, sin) for positions (..., T), shaped (..., T, 1, head_dim) to broadcast over heads.
        A step's flat positions take one index_select each (plain indexing is a heavier op)."""
        if positions.dim() == 1:
            cos, sin = self.cos.index_select(0, positions), self.sin.index_select(0, positions)
        else:
            cos, sin = self.cos[positions], self.sin[positions]
        if cos.dtype != dtype:  # buffers follow the model's dtype: no conversion op as a rule
            cos, sin = cos.to(dtype), sin.to(dtype)
        return cos, sin

    @staticmethod
    def apply(x: torch.Tensor, angles) -> torch.Tensor:
        """x: (..., T, heads, head_dim). x * cos + roll(x) * sin, the last two in one op."""
        cos, sin = angles
        return torch.addcmul(x * cos, x.roll(x.shape[-1] // 2, -1), sin)
