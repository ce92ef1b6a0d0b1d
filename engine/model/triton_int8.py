"""Weight-only int8 linear as a Triton kernel: the CUDA counterpart of csrc/int8_linear.cpp.

y = x @ (q * scale[:, None]).T with q int8 (N, K) (engine/model/int8.py quantizes), one float32
scale per output row, x the decode batch's rows (R, K) in float16, bfloat16 or float32.

Why a kernel and not `F.linear(x, dequantize(q, scale))`: widening the whole weight first writes
and reads it back in the activations' dtype, two to four times int8's bytes, which is exactly the
traffic int8 is meant to save. Here each program loads a (BLOCK_K, BLOCK_N) tile of q as int8
from memory, widens it in registers to x's dtype, and multiplies it into the rows with `tl.dot`
(float32 accumulators); the scale is applied once per output at the end, as the C++ kernel does.
This is the scheme gpt-fast and torchao call weight-only int8; the kernel is our own, written
plainly rather than autotuned.

Tiles: BLOCK_M = 16 rows (the smallest `tl.dot` takes; a decode batch of 1 pads it with masked
zero rows, which costs tensor-core work nobody waits for: decode waits for the weight bytes).
BLOCK_N = 32 output rows per program keeps enough programs to spread a small layer over the
multiprocessors; BLOCK_K = 128 int8 weights = 128 contiguous bytes of a weight row per load.
Masks cover every tail (rows, N and K not multiples of the blocks).

Tested for correctness in Triton's interpreter on CPU tensors (TRITON_INTERPRET=1, float32 and
float16; the interpreter has no bfloat16); it has not been timed on a GPU in this project.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

BLOCK_M, BLOCK_N, BLOCK_K = 16, 32, 128


@triton.jit
def _int8_linear_kernel(
    x_ptr, q_ptr, scale_ptr, y_ptr,
    M, N, K,
    stride_xm, stride_xk, stride_qn, stride_qk, stride_ym, stride_yn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    IEEE: tl.constexpr,
):
    rows = tl.program_id(1) * BLOCK_M + tl.arange(0, BLOCK_M)
    outs = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    ks = tl.arange(0, BLOCK_K)
    row_ok = rows < M
    out_ok = outs < N

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        k = k0 + ks
        k_ok = k < K
        x = tl.load(x_ptr + rows[:, None] * stride_xm + k[None, :] * stride_xk,
                    mask=row_ok[:, None] & k_ok[None, :], other=0.0)
        # The weight tile read as int8, (K, N) so it is the right operand of the product;
        # each column is BLOCK_K contiguous bytes of one weight row.
        q = tl.load(q_ptr + outs[None, :] * stride_qn + k[:, None] * stride_qk,
                    mask=k_ok[:, None] & out_ok[None, :], other=0)
        w = q.to(x.dtype)  # widened in registers, never written back
        if IEEE:  # float32 rows: full-precision products, not TF32
            acc = tl.dot(x, w, acc, input_precision="ieee")
        else:
            acc = tl.dot(x, w, acc)

    scale = tl.load(scale_ptr + outs, mask=out_ok, other=0.0)
    y = acc * scale[None, :]
    tl.store(y_ptr + rows[:, None] * stride_ym + outs[None, :] * stride_yn,
             y.to(y_ptr.dtype.element_ty), mask=row_ok[:, None] & out_ok[None, :])


def int8_linear_triton(x: torch.Tensor, q: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """x (R, K) float16/bfloat16/float32 @ (q int8 (N, K) * scale float32 (N,)).T -> (R, N) in
    x's dtype; the same contract as the C++ kernel (cpu_kernel.int8_linear_kernel), any strides."""
    if x.dim() != 2 or q.dim() != 2 or x.shape[1] != q.shape[1] or scale.shape != (q.shape[0],):
        raise ValueError(f"int8 linear: x {tuple(x.shape)}, q {tuple(q.shape)}, scale "
                         f"{tuple(scale.shape)} do not fit x (R, K), q (N, K), scale (N,)")
    if q.dtype != torch.int8:
        raise ValueError(f"int8 linear: q must be int8, not {q.dtype}")
    rows, k = x.shape
    n = q.shape[0]
    y = torch.empty(rows, n, dtype=x.dtype, device=x.device)
    grid = (triton.cdiv(n, BLOCK_N), triton.cdiv(rows, BLOCK_M))
    _int8_linear_kernel[grid](
        x, q, scale, y, rows, n, k,
        x.stride(0), x.stride(1), q.stride(0), q.stride(1), y.stride(0), y.stride(1),
        BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, IEEE=x.dtype == torch.float32,
    )
    return y
