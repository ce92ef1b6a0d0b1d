"""The KV calculator (engine.calc.kv_math): public shapes, agreement with the engine's presets and its
real cache, and the paged-against-contiguous fit."""

from __future__ import annotations

import pytest
import torch

from engine.calc.kv_math import (
    PUBLIC_SHAPES,
    element_bytes,
    fit,
    format_bytes,
    kv_bytes_per_token,
    shape_from_preset,
)
from engine.config import PRESETS
from engine.model.kv_cache import PagedKVCache

SHAPES = {s.name: s for s in PUBLIC_SHAPES}


@pytest.mark.parametrize("name, fp16", [("Llama-2-7B", 524_288), ("Llama-3-8B", 131_072),
                                        ("Llama-2-70B", 327_680)])
def test_public_shapes_bytes_per_token(name, fp16):
    shape = SHAPES[name]
    assert shape.bytes_per_token("fp16") == fp16
    assert shape.bytes_per_token("fp8") == fp16 // 2
    assert shape.bytes_per_sequence(1000, "fp16") == 1000 * fp16


def test_grouped_query_attention_is_named():
    assert SHAPES["Llama-2-7B"].attention_kind == "MHA"
    assert SHAPES["Llama-3-8B"].attention_kind.startswith("GQA (4")
    assert SHAPES["Llama-2-70B"].attention_kind.startswith("GQA (8")


@pytest.mark.parametrize("preset", list(PRESETS))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_formula_agrees_with_the_engine(preset, dtype):
    cfg = PRESETS[preset]
    shape = shape_from_preset(cfg.describe("cpu"))
    name = str(dtype).removeprefix("torch.")
    assert shape.bytes_per_token(name) == cfg.kv_bytes_per_token(dtype.itemsize)
    cache = PagedKVCache(cfg, 2 * cfg.kv_bytes_per_token(dtype.itemsize) * 16, 16, dtype, "cpu")
    assert cache.allocated_bytes == cache.capacity_tokens * shape.bytes_per_token(name)


def test_element_bytes_knows_torch_names_and_refuses_others():
    assert element_bytes("float32") == 4 and element_bytes("bfloat16") == 2
    assert element_bytes("float8_e4m3fn") == 1
    with pytest.raises(ValueError, match="unknown dtype"):
        element_bytes("int3")
    assert kv_bytes_per_token(2, 1, 8, "fp32") == 2 * 2 * 1 * 8 * 4


def test_paged_fits_more_than_contiguous():
    per_token = SHAPES["Llama-3-8B"].bytes_per_token("fp16")
    f = fit(16e9, per_token, tokens_per_sequence=1000, reserved_tokens=8192, block_size=16)
    assert f.contiguous == int(16e9 // (8192 * per_token)) == 14
    assert f.paged == int(16e9 // (63 * 16 * per_token))
    assert f.paged > f.contiguous and f.gain == f.paged / f.contiguous
    assert 0 < f.paged_waste < 16 / 1008 + 1e-9
    assert f.contiguous_waste == pytest.approx(1 - 1000 / 8192)


def test_a_sequence_of_whole_blocks_wastes_nothing_and_equal_lengths_tie():
    f = fit(1e6, 100, tokens_per_sequence=64, reserved_tokens=64, block_size=16)
    assert f.paged_waste == 0 and f.paged == f.contiguous


@pytest.mark.parametrize("kwargs, words", [
    ({"budget_bytes": 0}, "more than 0"), ({"budget_bytes": -5}, "more than 0"),
    ({"tokens_per_sequence": 0}, "at least 1 token"),
    ({"tokens_per_sequence": 5000}, "does not fit the context")])
def test_fit_refuses_nonsense(kwargs, words):
    args = {"budget_bytes": 1e9, "bytes_per_token": 100, "tokens_per_sequence": 100,
            "reserved_tokens": 4096, **kwargs}
    with pytest.raises(ValueError, match=words):
        fit(**args)


def test_format_bytes():
    assert format_bytes(524_288) == "512 KiB"
    assert format_bytes(3072) == "3 KiB"
    assert format_bytes(100) == "100 bytes"
    assert format_bytes(1.5 * 2**30) == "1.5 GiB"
