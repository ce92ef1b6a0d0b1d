"""Batch invariance: the same greedy prompt alone, inside batches, and with its prefill cut into
chunks beside others' decode rows (engine/invariance.py), in the batch-invariant mode (every
logit the same bits) and in the default mode (not invariant on this engine: measured)."""

from __future__ import annotations

import math

import pytest
import torch

from engine.errors import ConfigError
from engine.invariance import measure_invariance, ulp_distance
from engine.lab.results import InvarianceResult

SIZES = [1, 4, 16]
SMALL = {"seeds": 1, "prompt_len": 8, "new_tokens": 3}


def test_ulp_distance_counts_the_floats_between():
    one = torch.tensor([1.0])
    up = torch.nextafter(one, torch.tensor([2.0]))
    assert ulp_distance(one, one).item() == 0
    assert ulp_distance(one, up).item() == 1
    assert ulp_distance(torch.tensor([-0.0]), torch.tensor([0.0])).item() == 0
    smallest = torch.nextafter(torch.tensor([0.0]), one)  # across zero: 1 + 1 steps
    assert ulp_distance(-smallest, smallest).item() == 2
    below = torch.nextafter(-one, torch.tensor([-2.0]))
    assert ulp_distance(-one, below).item() == 1


def assert_bit_identical(result: InvarianceResult) -> None:
    for point in result.points:
        for run in point.seeds:
            assert run.first_diff is None, (point.batch, run)
            assert run.max_ulp == 0 and run.differing_logits == 0, (point.batch, run)
            assert run.compared_logits == SMALL["new_tokens"] * 4096  # every token compared


@pytest.mark.parametrize("chunk", [0, 3])
def test_invariant_mode_gives_the_same_bits_at_every_batch(engine, chunk):
    result = measure_invariance(engine, SIZES, chunk=chunk, invariant=True, **SMALL)
    assert result.batch_invariant and [p.batch for p in result.points] == SIZES
    assert_bit_identical(result)
    assert not engine.runner.batch_invariant  # the engine's own mode is restored


@pytest.mark.parametrize("backend", ["torch", "cpp"])
def test_invariant_mode_on_each_cpu_backend(tiny_engine_factory, request, backend):
    """Each backend brings its own ops (the C++ norm and activation with cpp): invariant on
    both, whichever the shared engine above runs."""
    if backend == "cpp":
        request.getfixturevalue("cpp_kernel")
    engine = tiny_engine_factory(backend=backend)
    assert engine.backend == backend
    result = measure_invariance(engine, [1, 16], chunk=3, invariant=True, **SMALL)
    assert_bit_identical(result)


def test_default_mode_moves_the_logits_in_a_batch(engine):
    """The default engine computes a batch's rows together, in layouts chosen by the row count:
    inside a batch the prompt's logits are not the bits it gets alone."""
    result = measure_invariance(engine, [1, 16], chunk=0, invariant=False, **SMALL)
    alone, batched = result.points
    assert alone.max_ulp == 0  # alone twice: the same computation, the same bits
    assert batched.max_ulp > 0 and batched.seeds[0].differing_logits > 0
    assert 0 < batched.max_abs < 1e-2  # the last bits, not another model
    assert math.isfinite(batched.step_ms)


def test_bad_settings_are_refused_in_one_line(engine):
    with pytest.raises(ConfigError, match="batch sizes run from 1"):
        measure_invariance(engine, [0, 2])
    with pytest.raises(ConfigError, match="batch sizes run from 1"):
        measure_invariance(engine, [66])
    with pytest.raises(ConfigError, match="chunk must be 0"):
        measure_invariance(engine, [1], chunk=-1)
