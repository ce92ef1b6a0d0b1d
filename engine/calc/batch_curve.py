"""What lesson 4 reads off a measured batch curve (total tokens/s per batch size), and where the
curve bends on a GPU, from the two kernels of a decode step.

The curve: the ladder of doublings measured without a gap from batch 1, each doubling's gain in
total tokens/s, the first doubling that gained less than a given share, and which prediction
choice the batch-1 to batch-8 ratio supports.

The bend on a GPU: a decode step is two kinds of work. The weight matrix multiplies are shared by
the batch, so their intensity grows with it (about B FLOPs per byte in bf16) and they reach the
ridge at B = ridge x bytes per weight / 2 whatever the context. Attention reads each sequence's
own cached keys and values, about heads / KV heads FLOPs per byte in bf16 at any batch, so it
never reaches the ridge. Throughput half-saturates where the KV reads equal the weight read:
B = weight bytes / (context x KV bytes per token), often before the weights reach the ridge
(JAX Scaling Book, "All About Transformer Inference", Austin et al., 2025).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

GROWTH_CHOICES = ("6 to 8 times as many", "3 to 6 times as many", "Under 3 times as many")


def ladder(tokens_per_s: Mapping[int, float], top: int = 64) -> list[int]:
    """1, 2, 4, ... as far as measured without a gap (up to `top`); [] without batch 1."""
    if 1 not in tokens_per_s:
        return []
    out = [1]
    while out[-1] * 2 in tokens_per_s and out[-1] * 2 <= top:
        out.append(out[-1] * 2)
    return out


def doubling_gains(tokens_per_s: Mapping[int, float], top: int = 64) -> dict[int, float]:
    """For each batch b of the ladder past 1: total tokens/s at b over that at b / 2, less 1."""
    rungs = ladder(tokens_per_s, top)
    return {b: tokens_per_s[b] / tokens_per_s[b // 2] - 1 for b in rungs[1:]}


def first_small_doubling(tokens_per_s: Mapping[int, float], share: float,
                         top: int = 64) -> int | None:
    """The first batch b of the ladder whose doubling from b / 2 gained less than `share`
    (0.2: less than 20% more tokens/s); None when every measured doubling gained more."""
    gains = doubling_gains(tokens_per_s, top)
    return next((b for b, g in gains.items() if g < share), None)


def growth_choice(one: float, eight: float) -> tuple[str, float]:
    """Which of GROWTH_CHOICES batch 8's total tokens/s over batch 1's supports, and the ratio."""
    ratio = eight / one
    return GROWTH_CHOICES[0 if ratio >= 6 else 1 if ratio >= 3 else 2], ratio


def weight_ridge_batch(ridge_flop_per_byte: float, bytes_per_weight: float) -> int:
    """The batch at which the weight matrix multiplies alone reach the ridge: each weight does
    2 FLOPs per sequence for its bytes, read once for the whole batch."""
    return math.ceil(ridge_flop_per_byte * bytes_per_weight / 2)


def kv_equals_weights_batch(weight_bytes: float, kv_bytes_per_token: float,
                            context: float) -> float:
    """The batch whose KV reads per step equal the weight read. A memory-bound step takes
    (weights + B x KV) / bandwidth, so throughput tends to bandwidth / KV per sequence as B
    grows, and reaches half of that here."""
    return weight_bytes / (kv_bytes_per_token * context)
