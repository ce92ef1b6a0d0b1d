"""fp8 KV quality, read through the engine's paged cache (engine.kv_quality)."""

from __future__ import annotations

import torch

from engine.kv_quality import kv_quality, paged_logits
from engine.model.model import full_logits
from engine.quantization import heldout


def test_paged_logits_with_the_float_cache_equal_a_full_recompute(engine):
    window = heldout(1)[0, :64]
    got = paged_logits(engine, window.tolist())
    want = full_logits(engine.model, window[None])[0].float()
    assert got.shape == want.shape
    assert torch.allclose(got, want, atol=1e-3), (got - want).abs().max()


def test_fp8_quality_is_measured_on_both_formats_and_the_engine_is_left_on_float(engine):
    quality = kv_quality(engine, windows=1)
    assert quality.positions == 256 and quality.windows == 1
    assert quality.loss_fp8 != quality.loss_float  # the fp8 pass read another cache
    assert abs(quality.loss_fp8 - quality.loss_float) < 0.05 * quality.loss_float
    assert quality.agreement >= 0.9
    assert not engine.cache.fp8
