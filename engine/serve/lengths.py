"""Bundled request-length distributions (`--lengths NAME`): prompt and output lengths in tokens
drawn like a public dataset's, from a small file in assets/lengths/ that names its source and
how it was built (lengths only, no text).

A file holds, for the input and the output, a lognormal model: the published mean length, the
sigma of the log-lengths, and the bounds a draw must fall in (one outside them is drawn again).
A lognormal with mean m and sigma s has mu = ln(m) - s^2 / 2.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

import numpy as np

from ..config import ASSETS
from ..errors import ConfigError

LENGTHS_DIR = ASSETS / "lengths"


@dataclass(frozen=True)
class LengthModel:
    """One side's lengths: lognormal of this mean and sigma, kept within [low, high]."""

    mean: float
    sigma: float
    low: int
    high: int

    def draw(self, rng: np.random.Generator, n: int) -> list[int]:
        mu = math.log(self.mean) - self.sigma ** 2 / 2
        out: list[int] = []
        while len(out) < n:
            draws = np.rint(rng.lognormal(mu, self.sigma, size=2 * (n - len(out)) + 8))
            out += [int(x) for x in draws if self.low <= x <= self.high]
        return out[:n]


@dataclass(frozen=True)
class Lengths:
    name: str
    source: str
    how: str
    input: LengthModel
    output: LengthModel


def available() -> list[str]:
    return sorted(p.stem for p in LENGTHS_DIR.glob("*.json"))


def load_lengths(name: str) -> Lengths:
    """The bundled distribution of this name; ConfigError naming the ones there are."""
    path = LENGTHS_DIR / f"{name}.json"
    if not path.is_file():
        raise ConfigError(f"unknown lengths {name!r}: choose one of {', '.join(available())}")
    data = json.loads(path.read_text(encoding="utf-8"))

    def side(d: dict) -> LengthModel:
        return LengthModel(float(d["mean"]), float(d["sigma"]), int(d["min"]), int(d["max"]))

    return Lengths(data["name"], data["source"], data["how"], side(data["input"]),
                   side(data["output"]))
