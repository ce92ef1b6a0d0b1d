"""The batch-invariance lesson's arithmetic on measured numbers (engine/invariance.py measures
them): how sure a count of differing texts is, what the invariant mode costs per step, and which
prediction a measurement supports. Torch-free."""

from __future__ import annotations

import math

Z95 = 1.959964  # the normal quantile of a two-sided 95% interval


def wilson_interval(k: int, n: int, z: float = Z95) -> tuple[float, float]:
    """The 95% Wilson score interval of a share k / n (k of n seeds whose text differs): unlike
    k / n +- z sqrt(p (1 - p) / n), it stays inside [0, 1] and is not empty at k = 0, where a
    few seeds bound the share from above only (0 of 4 still allows about half)."""
    if n < 1 or not 0 <= k <= n:
        raise ValueError(f"a share needs 0 <= k <= n and n >= 1 (got {k} of {n})")
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def cost_ratio(invariant_ms: float, default_ms: float) -> float:
    """How many times a default step's time the batch-invariant mode's step takes."""
    if default_ms <= 0:
        raise ValueError("a step time must be positive")
    return invariant_ms / default_ms


IDENTICAL, LAST_BITS, TEXT_DIFFERS = 0, 1, 2  # the prediction's choices, in its order


def outcome(max_ulp: int, texts_differ: int, seeds: int) -> int:
    """Which of the prediction's choices a batch's measurement supports: the same bits; logits
    moved but most texts the same; or most texts changed."""
    if max_ulp == 0:
        return IDENTICAL
    return TEXT_DIFFERS if 2 * texts_differ > seeds else LAST_BITS
