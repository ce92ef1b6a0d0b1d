"""Whether a model's weights fit in the last-level cache, and the two floors of a decode step
that follow: bytes / memory bandwidth when the weights stream from memory, bytes / cache
bandwidth when they stay in the cache between steps. A step of a model that fits can beat the
memory floor; one that is several times the cache cannot."""

from __future__ import annotations

from dataclasses import dataclass

# Weights this many times the last-level cache cannot stay in it between steps, whatever else
# runs: the lessons whose point is a memory-bound step measure such a model by default.
SEVERAL = 3.0


def fits_in_cache(weight_bytes: float, llc_bytes: float | None) -> bool | None:
    """Whether the weights fit in the cache; None when its size is unknown."""
    return None if llc_bytes is None else weight_bytes <= llc_bytes


def streams_from_memory(weight_bytes: float, llc_bytes: float | None) -> bool | None:
    """Whether the weights are several times the cache (so every step reads them from memory);
    None when the cache's size is unknown."""
    return None if llc_bytes is None else weight_bytes >= SEVERAL * llc_bytes


@dataclass(frozen=True)
class Floors:
    """A decode step's time against its two floors (all in ms)."""

    measured_ms: float
    memory_floor_ms: float  # bytes / memory bandwidth
    cache_floor_ms: float | None  # bytes / cache bandwidth (None when it is not measured)

    @property
    def beats_memory_floor(self) -> bool:
        return self.measured_ms < self.memory_floor_ms

    @property
    def over_memory_floor(self) -> float:
        """Measured time / memory floor: under 1 only for a step served from the cache."""
        return self.measured_ms / self.memory_floor_ms


def floors(step_bytes: float, measured_ms: float, memory_gbs: float,
           cache_gbs: float | None) -> Floors:
    """A step that reads `step_bytes` and took `measured_ms`, against both floors."""
    return Floors(measured_ms, step_bytes / memory_gbs / 1e6,
                  None if not cache_gbs else step_bytes / cache_gbs / 1e6)
