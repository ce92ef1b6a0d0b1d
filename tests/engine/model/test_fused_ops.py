"""The C++ library's fused layer ops (csrc/fused_ops.cpp) against the torch ops they replace:
the residual add with its RMSNorm, and SwiGLU's silu(gate) * up; then the model with them against
the same model without (the engine's end-to-end check against engine/reference.py is in
tests/engine/test_correctness.py)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from engine.model.layers import RMSNorm
from engine.model.model import MLP, LlamaModel

TOL = dict(atol=1e-5, rtol=1e-5)

# (leading shape, width): a decode step's few rows, a prefill's many (both threads), 3-D input,
# widths of tiny (256) and small (768), and an odd width the vector loops end inside.
SHAPES = [((1,), 256), ((3,), 768), ((700,), 256), ((2, 5), 768), ((4,), 37)]


@pytest.fixture(scope="module")
def ops(cpp_kernel):
    from engine.model.cpu_kernel import fused_layer_ops

    return fused_layer_ops()


@pytest.mark.parametrize(("lead", "width"), SHAPES)
def test_add_rms_norm_is_the_add_then_the_norm(ops, lead, width):
    add_rms_norm = ops.add_rms_norm
    gen = torch.Generator().manual_seed(width)
    x, residual = torch.randn(2, *lead, width, generator=gen) * 3
    weight = torch.rand(width, generator=gen) + 0.5
    total, normed = add_rms_norm(x, residual, weight, 1e-5)
    torch.testing.assert_close(total, x + residual, atol=0, rtol=0)
    torch.testing.assert_close(normed, F.rms_norm(x + residual, (width,), weight, 1e-5), **TOL)


def test_add_rms_norm_takes_strided_input_and_leaves_it_alone(ops):
    add_rms_norm = ops.add_rms_norm
    x = torch.randn(6, 64)[:, :32]
    residual = torch.randn(6, 32)
    before = x.clone()
    total, normed = add_rms_norm(x, residual, torch.ones(32), 1e-5)
    assert torch.equal(x, before)
    torch.testing.assert_close(normed, F.rms_norm(x + residual, (32,), torch.ones(32), 1e-5),
                               **TOL)


@pytest.mark.parametrize(("lead", "width"), SHAPES)
def test_silu_mul_is_silu_of_gate_times_up(ops, lead, width):
    silu_mul = ops.silu_mul
    gate_up = torch.randn(*lead, 2 * width, generator=torch.Generator().manual_seed(width)) * 4
    gate, up = gate_up.chunk(2, dim=-1)
    out = silu_mul(gate_up)
    assert out.shape == (*lead, width)
    torch.testing.assert_close(out, F.silu(gate) * up, **TOL)


def test_silu_mul_of_extreme_gates_is_finite(ops):
    """A very negative gate gives 0 (not NaN from inf / inf), a very positive one gate * up."""
    silu_mul = ops.silu_mul
    gate = torch.tensor([[-1e4, -200.0, -88.0, 0.0, 88.0, 200.0, 1e4, -1e-30]])
    gate_up = torch.cat([gate, torch.full_like(gate, 2.0)], dim=-1)
    out = silu_mul(gate_up)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out, F.silu(gate) * 2.0, **TOL)


def test_bad_inputs_get_a_clear_error(ops):
    add_rms_norm, silu_mul = ops.add_rms_norm, ops.silu_mul
    with pytest.raises(RuntimeError, match="gate and up"):
        silu_mul(torch.randn(2, 7))
    with pytest.raises(RuntimeError, match="float32"):
        silu_mul(torch.randn(2, 8, dtype=torch.float64))
    with pytest.raises(RuntimeError, match="weight's length"):
        add_rms_norm(torch.randn(2, 8), torch.randn(2, 8), torch.ones(9), 1e-5)


def test_model_with_fused_ops_computes_the_same_hidden_states(ops, tiny_engine_factory):
    """The tiny model's forward pass with and without the fused ops (torch's causal attention,
    so only the norms and the MLPs differ); the model with them keeps the ops it was given."""
    from engine.model.model import causal_attend

    model = tiny_engine_factory(backend="torch").model
    assert not any(getattr(m, "fused_add", None) or getattr(m, "silu_mul", None)
                   for m in model.modules()) and model.decode_model is None
    ids = torch.randint(0, model.cfg.vocab, (2, 19), generator=torch.Generator().manual_seed(3))
    positions = torch.arange(19).expand(2, 19)
    with torch.inference_mode():
        plain = model(ids, positions, causal_attend)
        model.use_fused_ops(ops)
        fused = model(ids, positions, causal_attend)
    assert all(m.fused_add is ops.add_rms_norm for m in model.modules() if isinstance(m, RMSNorm))
    assert all(m.silu_mul is ops.silu_mul for m in model.modules() if isinstance(m, MLP))
    assert model.decode_model is ops.decode_model and len(model.decode_weights) == 6 * 6 + 2
    torch.testing.assert_close(fused, plain, atol=1e-4, rtol=1e-4)


def test_fused_ops_refuse_a_half_precision_model(ops):
    from engine.config import get_preset

    model = LlamaModel(get_preset("tiny")).to(torch.bfloat16)
    with pytest.raises(ValueError, match="float32"):
        model.use_fused_ops(ops)


def test_decode_model_refuses_a_wrong_weight_list_in_one_line(ops):
    """Six weights per layer, then the final norm's and the output projection's; and a product
    layout it does not know."""
    cache = torch.zeros(2, 4, 16, 2, 32)
    with pytest.raises(RuntimeError, match="six weights per layer"):
        ops.decode_model(torch.tensor([1]), torch.tensor([0]), torch.randn(10, 256),
                         torch.randn(64, 1, 32), torch.randn(64, 1, 32), [torch.ones(256)] * 5,
                         1e-5, torch.tensor([0]), cache, cache.clone(), torch.tensor([[0]]),
                         torch.tensor([1], dtype=torch.int32), 8, 0)
    layer = [torch.ones(256), torch.randn(384, 256), torch.randn(256, 256), torch.ones(256),
             torch.randn(128, 256), torch.randn(256, 64)]
    with pytest.raises(RuntimeError, match="unknown product layout 9"):
        ops.decode_model(torch.tensor([1]), torch.tensor([0]), torch.randn(10, 256),
                         torch.randn(64, 1, 32), torch.randn(64, 1, 32),
                         layer * 2 + [torch.ones(256), torch.randn(10, 256)],
                         1e-5, torch.tensor([0]), cache, cache.clone(), torch.tensor([[0]]),
                         torch.tensor([1], dtype=torch.int32), 8, 9)
