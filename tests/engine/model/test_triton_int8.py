"""The Triton weight-only int8 kernel (engine/model/triton_int8.py, what --weights int8 uses on
CUDA) against the float reference x @ dequantize(q, scale).T, in Triton's interpreter on CPU
tensors where no GPU is present (tests/conftest.py sets TRITON_INTERPRET=1): decode batches of
1 to 32 rows, shapes with tails in every dimension; and the trained tiny model decoding through
it picks the C++ int8 kernel's greedy tokens."""

import pytest
import torch

pytest.importorskip("triton")

from engine.model import int8  # noqa: E402
from engine.model.layers import Linear  # noqa: E402
from engine.model.triton_int8 import BLOCK_K, BLOCK_M, BLOCK_N, int8_linear_triton  # noqa: E402
from tests.engine.model.int8_decoding import PROMPTS, decode  # noqa: E402

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
TOL = {torch.float32: dict(atol=1e-5, rtol=1e-5), torch.float16: dict(atol=2e-3, rtol=2e-3)}
NEW_TOKENS = 2  # in the end-to-end test: the prefill and one decode step
# (N, K): one block each way; N and K tails; K shorter than a block; N shorter than a block
SHAPES = [(BLOCK_N, BLOCK_K), (3 * BLOCK_N + 5, 2 * BLOCK_K + 44), (70, 96), (7, 300)]


def case(rows: int, n: int, k: int, dtype: torch.dtype, seed: int = 0):
    """x (rows, K) in dtype, not contiguous (every other column: the kernel follows strides),
    and a quantized weight whose products come out near 1 in size."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, 2 * k, generator=gen).to(dtype)[:, ::2]
    q, scale = int8.quantize_rows(torch.randn(n, k, generator=gen) / k ** 0.5)
    return x.to(DEVICE), q.to(DEVICE), scale.to(DEVICE)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=["fp32", "fp16"])
@pytest.mark.parametrize("shape", SHAPES, ids=[f"{n}x{k}" for n, k in SHAPES])
@pytest.mark.parametrize("rows", [1, 2, 5, BLOCK_M, BLOCK_M + 1, int8.KERNEL_ROWS])
def test_kernel_multiplies_by_the_dequantized_weight(rows, shape, dtype):
    x, q, scale = case(rows, *shape, dtype, seed=rows)
    assert not x.is_contiguous()
    expected = (x.float() @ int8.dequantize(q, scale).T).to(dtype)
    out = int8_linear_triton(x, q, scale)
    assert out.dtype == dtype and out.shape == (rows, shape[0])
    torch.testing.assert_close(out, expected, **TOL[dtype])


def test_each_output_row_gets_its_own_scale():
    """Scales far apart (1e-3 to 1e3, neighbours 1.4x apart): a scale applied to the wrong
    output, or not at all, shows. Compared per unit of scale (the outputs span six decades)."""
    x, q, _ = case(3, 40, 130, torch.float32)
    scale = torch.logspace(-3, 3, 40, device=DEVICE)
    out = int8_linear_triton(x, q, scale)
    expected = x @ int8.dequantize(q, scale).T
    torch.testing.assert_close(out / scale, expected / scale, rtol=1e-4, atol=1e-4)


def test_mismatched_shapes_and_float_weights_are_refused_clearly():
    x, q, scale = case(2, 8, 64, torch.float32)
    with pytest.raises(ValueError, match=r"x \(2, 64\), q \(8, 32\)"):
        int8_linear_triton(x, q[:, :32], scale)
    with pytest.raises(ValueError, match="q must be int8, not torch.float32"):
        int8_linear_triton(x, q.float(), scale)


@pytest.mark.parametrize("rows", [3, int8.KERNEL_ROWS + 8], ids=["decode", "prefill"])
def test_half_precision_linear_layer_with_int8_weights(rows):
    """A layer as the engine holds it on CUDA (half-precision activations, weight quantized
    from the half-precision one): a decode's few rows go through the kernel, a longer prefill
    widens the weight to the rows' dtype; either way the rows' dtype comes out."""
    layer = Linear(96, 70).to(DEVICE, torch.float16)
    torch.nn.init.normal_(layer.weight, std=96 ** -0.5)
    layer.quantize_int8(int8_linear_triton)
    x = torch.randn(rows, 96, device=DEVICE, dtype=torch.float16)
    out = layer(x)
    expected = (x.float() @ int8.dequantize(layer.qweight, layer.scale).T).half()
    assert out.dtype == torch.float16
    torch.testing.assert_close(out, expected, **TOL[torch.float16])


def use_kernel(model, kernel) -> None:
    for m in model.modules():
        if isinstance(m, Linear) and m.qweight is not None:
            m.int8_kernel = kernel


def test_tiny_decodes_the_same_greedy_tokens_through_the_triton_kernel(int8_engine, int8_kernel):
    """The int8 tiny engine on CPU, its C++ kernel swapped for the Triton one: the prompt's
    prefill and every decode step multiply through Triton, and the greedy tokens and their
    logits are the C++ kernel's. Two tokens (the prefill's and one decode step's): the
    interpreter takes seconds a step, and a second decode step goes through the same launches
    as the first."""
    prompt = int8_engine.tokenizer.encode(PROMPTS[0])
    assert 1 < len(prompt) <= int8.KERNEL_ROWS  # the prefill goes through the kernel too
    want_tokens, want_logits = decode(int8_engine, prompt, NEW_TOKENS)
    rows_seen = []

    def triton_counted(x, q, scale):
        rows_seen.append(x.shape[0])
        return int8_linear_triton(x, q, scale)

    use_kernel(int8_engine.model, triton_counted)
    try:
        tokens, logits = decode(int8_engine, prompt, NEW_TOKENS)
    finally:
        use_kernel(int8_engine.model, int8_kernel)
    layers = int8_engine.model_config.layers
    # the prefill: 4 products a layer on the prompt's rows, the output projection on its last;
    # each decode step: all 4 x layers + 1 on one row
    assert rows_seen.count(len(prompt)) == 4 * layers
    assert rows_seen.count(1) == 1 + (NEW_TOKENS - 1) * (4 * layers + 1)
    assert len(tokens) == NEW_TOKENS and tokens == want_tokens
    torch.testing.assert_close(logits, want_logits, atol=1e-4, rtol=1e-4)
