"""A model fits in the last-level cache or streams from memory; a step's two floors."""

from __future__ import annotations

import pytest

from engine.calc.cache_fit import SEVERAL, fits_in_cache, floors, streams_from_memory
from engine.config import PRESETS

MIB = 2**20


def weights(name: str) -> int:
    return PRESETS[name].params * 4  # float32 on a CPU


def test_on_a_32_mib_cache_tiny_fits_and_mini_streams_from_memory():
    assert fits_in_cache(weights("tiny"), 32 * MIB)
    assert not streams_from_memory(weights("tiny"), 32 * MIB)
    assert not fits_in_cache(weights("mini"), 32 * MIB)
    assert streams_from_memory(weights("mini"), 32 * MIB)
    assert weights("mini") / (32 * MIB) > SEVERAL
    assert fits_in_cache(1, None) is None and streams_from_memory(1, None) is None


def test_the_floors_are_bytes_over_each_bandwidth():
    f = floors(130e6, measured_ms=5.0, memory_gbs=26.0, cache_gbs=130.0)
    assert f.memory_floor_ms == pytest.approx(5.0) and f.cache_floor_ms == pytest.approx(1.0)
    assert not f.beats_memory_floor and f.over_memory_floor == pytest.approx(1.0)
    fast = floors(22e6, measured_ms=0.5, memory_gbs=22.0, cache_gbs=None)
    assert fast.beats_memory_floor and fast.cache_floor_ms is None
    assert fast.over_memory_floor == pytest.approx(0.5)
