"""The quadratic part of a long prompt: prefill time against prompt length, fitted as
t = a + b x L + c x L^2, and the length where attention's work overtakes the weights'.

Why that shape. A prefill pass over an L-token prompt multiplies every weight by every token
(work in proportion to L: the b term) and, in causal attention, every token's query by the keys
of the tokens before it (L(L+1)/2 pairs in every head of every layer: the c term); a fixed cost
per pass (launches, the sampler, Python) is a. engine.calc.step_cost counts the same FLOPs:

    weight FLOPs    ~ 2 x L x P'                         (P' the weights every token meets)
    attention FLOPs ~ 4 x L(L+1)/2 x heads x head_dim x layers

so attention's work equals the weights' at L* = P' / (heads x head_dim x layers) - 1/2 (from
2 L P' = 2 L (L + 1) x heads x head_dim x layers). That is a count of arithmetic, not of time:
where attention runs as efficiently as the matrix products (FlashAttention-class kernels, Dao et
al. 2022, arXiv:2205.14135; FlashAttention-2, Dao 2023, arXiv:2307.08691, whose point is to bring
attention near the matmul's FLOP/s), time follows the FLOPs and the attention term takes over
near L*; a slower attention kernel makes it take over sooner.

The fit is ordinary least squares on the measured (L, t) points, with each coefficient's 95%
interval from Student's t on the residuals' standard error (n - 3 degrees of freedom), and the
measured crossover L = b / c where the fitted quadratic term equals the linear one.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

CONFIDENCE = 0.95
# Student's t, 97.5th percentile (two-sided 95%), for 1 to 30 degrees of freedom: the standard
# table (e.g. NIST/SEMATECH e-Handbook of Statistical Methods, 1.3.6.7.2).
T_975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179,
         2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064,
         2.060, 2.056, 2.052, 2.048, 2.045, 2.042)
Z_975 = 1.959964


def t_975(dof: int) -> float:
    """Student's t 97.5th percentile: the table to 30 degrees of freedom, then the Cornish-
    Fisher expansion about the normal's (within 0.001 of the exact value there)."""
    if dof < 1:
        raise ValueError("Student's t needs one or more degrees of freedom")
    if dof <= len(T_975):
        return T_975[dof - 1]
    z = Z_975
    return z + (z ** 3 + z) / (4 * dof) + (5 * z ** 5 + 16 * z ** 3 + 3 * z) / (96 * dof ** 2)


@dataclass(frozen=True)
class Coefficient:
    """A fitted coefficient with its interval (None: too few points to bound it)."""

    value: float
    low: float | None
    high: float | None


@dataclass(frozen=True)
class QuadraticFit:
    """t = a + b L + c L^2 (t in the unit of the data, L in tokens)."""

    a: Coefficient
    b: Coefficient
    c: Coefficient
    points: int
    r_squared: float

    def predict(self, length: float) -> float:
        return self.a.value + self.b.value * length + self.c.value * length ** 2

    def linear_part(self, length: float) -> float:
        """The weight term b L at a length."""
        return self.b.value * length

    def quadratic_part(self, length: float) -> float:
        """The attention term c L^2 at a length."""
        return self.c.value * length ** 2

    def quadratic_share(self, length: float) -> float:
        """The attention term's share of the fitted time at a length."""
        total = self.predict(length)
        return self.quadratic_part(length) / total if total > 0 else 0.0

    @property
    def crossover(self) -> float | None:
        """The length where c L^2 equals b L (None where c or b is not positive)."""
        if self.c.value <= 0 or self.b.value <= 0:
            return None
        return self.b.value / self.c.value


def fit_quadratic(lengths: Sequence[float], times: Sequence[float]) -> QuadraticFit:
    """Least squares of times on (1, L, L^2); intervals need four or more distinct lengths."""
    x = np.asarray(lengths, dtype=np.float64)
    y = np.asarray(times, dtype=np.float64)
    if x.shape != y.shape or x.ndim != 1:
        raise ValueError("lengths and times must be two lists of the same length")
    if len(set(x.tolist())) < 3:
        raise ValueError("a quadratic needs three or more distinct prompt lengths")
    design = np.column_stack([np.ones_like(x), x, x * x])
    coef, *_ = np.linalg.lstsq(design, y, rcond=None)
    residuals = y - design @ coef
    dof = len(x) - 3
    total = float(((y - y.mean()) ** 2).sum())
    r_squared = 1.0 - float((residuals ** 2).sum()) / total if total > 0 else 1.0
    if dof > 0:
        sigma2 = float((residuals ** 2).sum()) / dof
        cov = sigma2 * np.linalg.inv(design.T @ design)
        half = t_975(dof) * np.sqrt(np.diag(cov))
        bounds = [(float(v - h), float(v + h)) for v, h in zip(coef, half, strict=True)]
    else:
        bounds = [(None, None)] * 3
    a, b, c = (Coefficient(float(v), lo, hi) for v, (lo, hi) in zip(coef, bounds, strict=True))
    return QuadraticFit(a, b, c, len(x), r_squared)


def attention_crossover(params_per_token: float, heads: int, head_dim: int,
                        layers: int) -> float:
    """The prompt length where causal attention's FLOPs equal the weights' (module docstring):
    params_per_token is P', the weights every prompt token is multiplied by."""
    per_pair = heads * head_dim * layers
    return params_per_token / per_pair - 0.5


def fit_lengths(context: int, points: int = 8) -> list[int]:
    """Prompt lengths for the fit: `points` evenly spaced up to the longest prompt the context
    takes with one output token (context - 1), so the attention term has room to show."""
    top = context - 1
    step = top / points
    return sorted({max(1, math.floor(step * (i + 1))) for i in range(points)})
