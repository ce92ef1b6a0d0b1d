"""The lessons whose point is a memory-bound decode step measure by default a model that cannot
stay in this machine's last-level cache: its weights are several times that cache, read from the
machine itself (as Linux reports it), so every step streams them from memory as the words say."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.calc.cache_fit import SEVERAL
from engine.config import PRESETS
from lessons.knob import KnobLesson
from lessons.roofline import RooflineLesson

CPU_BYTES_PER_WEIGHT = 4  # the presets run in float32 on a CPU


def last_level_cache() -> int | None:
    """The largest data or unified cache of cpu0 in /sys, in bytes; None where there is none."""
    best = None
    for index in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*"):
        try:
            if (index / "type").read_text().strip() == "Instruction":
                continue
            size = (index / "size").read_text().strip().upper()
        except OSError:
            continue
        scale = {"K": 2**10, "M": 2**20, "G": 2**30}.get(size[-1:], 1)
        value = int(size.rstrip("KMG")) * scale
        best = value if best is None else max(best, value)
    return best


@pytest.mark.parametrize("lesson", [KnobLesson, RooflineLesson])
def test_the_default_model_is_several_times_the_last_level_cache(lesson):
    llc = last_level_cache()
    if llc is None:
        pytest.skip("this OS does not say how large its caches are")
    preset = lesson.param.preset.default
    weights = PRESETS[preset].params * CPU_BYTES_PER_WEIGHT
    assert weights >= SEVERAL * llc, (
        f"{lesson.__name__}'s default {preset} has {weights / 1e6:.0f} MB of weights, not "
        f"{SEVERAL:g} times this machine's {llc / 2**20:.0f} MiB last-level cache")

