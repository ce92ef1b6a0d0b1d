"""Weight-only int8 (engine/model/int8.py, csrc/int8_linear.cpp, EngineConfig.weight_format;
the Triton kernel for CUDA has its own tests, test_triton_int8.py):
the rounding is what the scheme says, the kernel computes x @ (q * scale).T, and the int8 engine
decodes exactly as a float model holding the same rounded weights would (greedy tokens equal,
logits close) while reading a quarter of the bytes."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch
from torch import nn

from engine.config import EngineConfig, checkpoint_path, get_preset
from engine.errors import ConfigError
from engine.llm_engine import LLMEngine, int8_kernel_for
from engine.model import int8
from engine.model.layers import Linear
from engine.model.model import LlamaModel, full_logits, load_checkpoint
from tests.engine.model.int8_decoding import PROMPTS, decode


def test_rows_round_to_int8_with_one_scale_each():
    w = torch.randn(6, 40, generator=torch.Generator().manual_seed(0))
    w[2] = 0.0
    q, scale = int8.quantize_rows(w)
    assert q.dtype == torch.int8 and scale.dtype == torch.float32 and scale.shape == (6,)
    assert q.abs().max() <= 127
    assert scale[2] == 1.0 and not q[2].any()  # an all-zero row
    for row in (0, 1, 3, 4, 5):
        assert scale[row] == pytest.approx(w[row].abs().max().item() / 127)
        assert q[row].abs().max() == 127  # the largest weight of a row uses the whole range
    error = (int8.dequantize(q, scale) - w).abs()
    assert (error <= scale[:, None] / 2 + 1e-7).all()  # at most half a step per weight


@pytest.mark.parametrize("rows", [1, 2, 3, 4, 5, 9, 33])
@pytest.mark.parametrize("out_features", [37, 256])
def test_kernel_multiplies_by_the_dequantized_weight(int8_kernel, rows, out_features):
    gen = torch.Generator().manual_seed(rows)
    q, scale = int8.quantize_rows(torch.randn(out_features, 96, generator=gen))
    x = torch.randn(rows, 2 * 96, generator=gen)[:, ::2]  # not contiguous: the kernel copes
    expected = x @ int8.dequantize(q, scale).T
    torch.testing.assert_close(int8_kernel(x, q, scale), expected, rtol=1e-5, atol=1e-5)


def dequantized_twin() -> LlamaModel:
    """tiny in float32 holding exactly the weights the int8 engine holds: every linear layer's
    weight rounded to int8 and widened back; the output projection untied from the embedding
    (the int8 engine rounds the projection, not the table it looks tokens up in)."""
    cfg = get_preset("tiny")
    model = LlamaModel(cfg)
    load_checkpoint(model, checkpoint_path(cfg))
    model.lm_head.weight = nn.Parameter(model.embed.weight.detach().clone())
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, Linear):
                m.weight.copy_(int8.dequantize(*int8.quantize_rows(m.weight)))
    return model.eval()


@pytest.mark.parametrize("text", PROMPTS)
def test_int8_engine_decodes_as_the_rounded_float_model(int8_engine, text):
    prompt = int8_engine.tokenizer.encode(text)
    tokens, logits = decode(int8_engine, prompt, 20)
    with torch.inference_mode():
        full = full_logits(dequantized_twin(), torch.tensor([prompt + tokens]))[0]
    reference = full[len(prompt) - 1: -1]
    assert reference.argmax(-1).tolist() == tokens
    torch.testing.assert_close(logits, reference, atol=1e-3, rtol=1e-3)


def test_int8_weights_read_a_quarter_of_the_bytes(int8_engine, engine):
    cfg = int8_engine.model_config
    q_out = (cfg.heads + 2 * cfg.kv_heads) * cfg.head_dim
    shapes = [(q_out, cfg.hidden), (cfg.hidden, cfg.heads * cfg.head_dim),
              (2 * cfg.intermediate, cfg.hidden), (cfg.hidden, cfg.intermediate)]
    per_layer = sum(n * k + 4 * n for n, k in shapes)  # an int8 per weight, a float scale per row
    norms = 4 * cfg.hidden * (2 * cfg.layers + 1)
    expected = cfg.layers * per_layer + cfg.vocab * cfg.hidden + 4 * cfg.vocab + norms
    assert int8_engine.model.weight_bytes() == expected
    assert 0.25 < expected / engine.model.weight_bytes() < 0.26
    linears = [m for m in int8_engine.model.modules() if isinstance(m, Linear)]
    assert len(linears) == 4 * cfg.layers + 1 and all(m.weight is None for m in linears)


def test_unknown_weight_format_is_refused():
    with pytest.raises(ConfigError, match="unknown weight format 'int4'"):
        LLMEngine(EngineConfig(preset="tiny", device="cpu", weight_format="int4"))


def test_cuda_int8_weights_use_the_triton_kernel():
    pytest.importorskip("triton")
    from engine.model.triton_int8 import int8_linear_triton

    assert int8_kernel_for("cuda", torch.bfloat16) is int8_linear_triton
    assert int8_kernel_for("cuda:1", torch.float16) is int8_linear_triton


def test_cuda_int8_without_triton_is_refused_in_one_line(monkeypatch):
    monkeypatch.setitem(sys.modules, "engine.model.triton_int8", None)  # as if triton were absent
    with pytest.raises(ConfigError) as refused:
        int8_kernel_for("cuda", torch.bfloat16)
    assert str(refused.value) == ("int8 weights on CUDA need the Triton int8 kernel, and triton "
                                  "is not installed here: pip install triton, or use --weights "
                                  "fp32")


@pytest.mark.parametrize("device, dtype", [("mps", torch.float32), ("cpu", torch.bfloat16)])
def test_int8_where_no_kernel_exists_is_refused_in_one_line(device, dtype):
    with pytest.raises(ConfigError, match=f"not for {device} in {str(dtype)[6:]}: use --weights "
                                          "fp32$"):
        int8_kernel_for(device, dtype)


def run_engine(args: list[str], cache) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "engine", *args], capture_output=True,
                          text=True, timeout=300, env={**os.environ, "LLM_SPEED_CACHE": str(cache)})


def test_cli_int8_without_its_kernel_is_refused_in_one_line(tmp_path):
    out = run_engine(["generate", "--prompt", "hi", "--weights", "int8"], tmp_path)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert out.stderr.strip().splitlines() == [
        "error: int8 weights need the C++ int8 linear kernel, which is not built on this "
        "machine: run python -m engine build-kernel (about a minute), or use --weights fp32"]


def test_cli_generate_with_int8_weights_says_so(int8_kernel):
    out = run_engine(["generate", "--prompt", "The list", "--max-new-tokens", "4", "--json",
                      "--weights", "int8"], os.environ["LLM_SPEED_CACHE"])  # where it was built
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["weight_format"] == "int8" and 1 <= len(result["tokens"]) <= 4


def test_quality_compares_the_two_models_on_the_held_out_windows(int8_kernel):
    from engine.llm_engine import build_model
    from engine.quantization import compare, heldout, int8_quality
    from engine.training.train import heldout_loss

    quality = int8_quality(windows=2, seq_len=64)
    assert quality.windows == 2 and quality.positions == 128
    windows = heldout(2, 64)  # tokens 0-64 and 64-128 of the held-out stream
    tokens = torch.cat([windows[0], windows[1][1:]])
    fp32 = build_model("tiny", "cpu")
    assert quality.loss_fp32 == pytest.approx(heldout_loss(fp32, tokens, 64, 2), rel=1e-5)
    # the rounding moves the loss, a little; a model compared with itself agrees everywhere
    assert quality.loss_int8 != quality.loss_fp32
    assert abs(quality.loss_int8 - quality.loss_fp32) < 0.1
    assert 0.8 < quality.agreement <= 1.0
    assert compare(fp32, fp32, windows)[2] == 1.0
