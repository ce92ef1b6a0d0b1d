"""How to multiply a few rows of activations by a weight matrix on this CPU, measured once.

A decode step multiplies B rows (one per sequence) by every weight matrix. The physics says a
memory-bound step should cost about the same for B = 1 and B = 8, but BLAS libraries pick their
inner kernels by shape, and for small B the choice is erratic: with MKL on a 2-core AVX2 machine,
W @ x.T (W stored out x in) streams a 768 x 3072 matrix at 24 GB/s for 2 or 4 rows and 12 GB/s for
8, 16 rows cost less than 8, and one row is fastest as x @ W.T with W.T stored in x out
(shared/PERF-NOTES.md has the table). Rather than hard-code one machine's quirks, the engine times
three ways for every row count from 1 to MAX_TUNED_ROWS and every weight shape of the model, and
keeps the fastest:

- "x_wt": x @ W.T, from a stored (in x out) copy;
- "w_xt": (W @ x.T).T, from the usual (out x in) weight;
- "w_xt_pad": the same with x padded with zero rows to PAD_ROWS, the dropped rows cost nothing
  if the library is faster at that size.

Plans are cached per machine (CPU, torch version, threads) in the engine's cache directory.
Above MAX_TUNED_ROWS rows the product is compute-bound and (W @ x.T).T or F.linear are used.
"""

from __future__ import annotations

import json
import time

import torch
import torch.nn.functional as F

from .device import describe_device
from .paths import cache_dir, write_json_atomic

VARIANTS = ("x_wt", "w_xt", "w_xt_pad")
MAX_TUNED_ROWS = 16
PAD_ROWS = 16
PLAN_VERSION = 1


def multiply(rows: torch.Tensor, weight: torch.Tensor, weight_t: torch.Tensor,
             variant: str) -> torch.Tensor:
    """rows (M, in) times the weight, the way `variant` says; returns (M, out)."""
    if variant == "x_wt":
        return rows @ weight_t
    if variant == "w_xt_pad" and rows.shape[0] < PAD_ROWS:
        count = rows.shape[0]
        padded = torch.cat([rows, rows.new_zeros(PAD_ROWS - count, rows.shape[1])])
        return (weight @ padded.t()).t()[:count]
    if variant in ("w_xt", "w_xt_pad"):
        return (weight @ rows.t()).t()
    return F.linear(rows, weight)


def tune_shape(out_features: int, in_features: int, dtype: torch.dtype,
               budget_s: float = 0.2) -> list[str]:
    """The fastest variant for 1..MAX_TUNED_ROWS rows; variants are timed interleaved, best of
    several runs, so a passing hiccup on a shared machine rarely decides."""
    gen = torch.Generator().manual_seed(0)
    weight = torch.randn(out_features, in_features, generator=gen, dtype=dtype)
    weight_t = weight.t().contiguous()
    x = torch.randn(MAX_TUNED_ROWS, in_features, generator=gen, dtype=dtype)
    start = time.perf_counter()
    multiply(x[:1], weight, weight_t, "x_wt")
    one_call = max(time.perf_counter() - start, 1e-5)
    calls = MAX_TUNED_ROWS * len(VARIANTS)
    repeats = int(min(15, max(3, budget_s / (calls * one_call))))
    plan = []
    for count in range(1, MAX_TUNED_ROWS + 1):
        rows = x[:count]
        times = dict.fromkeys(VARIANTS, float("inf"))
        for _ in range(repeats):
            for variant in VARIANTS:
                start = time.perf_counter()
                multiply(rows, weight, weight_t, variant)
                times[variant] = min(times[variant], time.perf_counter() - start)
        plan.append(min(VARIANTS, key=times.get))
    return plan


def _plan_file():
    key = f"{describe_device('cpu')}|torch {torch.__version__}|threads {torch.get_num_threads()}"
    safe = "".join(c if c.isalnum() else "_" for c in key)[:150]
    return cache_dir() / f"matmul-plan-v{PLAN_VERSION}-{safe}.json"


_memory: dict[str, list[str]] = {}


def matmul_plans(shapes: set[tuple[int, int]], dtype: torch.dtype) -> dict[tuple[int, int], list]:
    """Plans for these (out, in) shapes: from memory, the machine's cache file, or measured."""
    path = _plan_file()
    if not _memory and path.exists():
        try:
            _memory.update(json.loads(path.read_text()))
        except ValueError:
            pass
    measured = False
    plans = {}
    for out_f, in_f in sorted(shapes):
        key = f"{out_f}x{in_f}:{str(dtype).removeprefix('torch.')}"
        if key not in _memory:
            _memory[key] = tune_shape(out_f, in_f, dtype)
            measured = True
        plans[(out_f, in_f)] = _memory[key]
    if measured:
        write_json_atomic(path, _memory)
    return plans
