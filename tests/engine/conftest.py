"""Engines shared by the engine tests: the real tiny preset, built once per test session."""

from __future__ import annotations

import random

import pytest
from helpers import kernel_or_skip

from engine.config import EngineConfig
from engine.llm_engine import LLMEngine
from engine.model.cpu_kernel import PAGED_DECODE, paged_decode_kernel

KV_BUDGET = 64 * 2**20  # plenty for the tests, small enough to allocate in a blink


def shuffled(engine: LLMEngine, seed: int = 0) -> LLMEngine:
    """Hand out KV blocks in a random order, so no sequence's blocks are contiguous."""
    blocks = list(engine.blocks.free_blocks)
    random.Random(seed).shuffle(blocks)
    engine.blocks.free_blocks.clear()
    engine.blocks.free_blocks.extend(blocks)
    return engine


def new_tiny_engine(seed: int = 0, backend: str = "auto", weight_format: str = "fp32") -> LLMEngine:
    """The real tiny preset on CPU, with its blocks handed out in a shuffled order."""
    config = EngineConfig(preset="tiny", device="cpu", kv_budget_bytes=KV_BUDGET, backend=backend,
                          weight_format=weight_format)
    return shuffled(LLMEngine(config), seed)


@pytest.fixture(scope="session")
def tiny_engine() -> LLMEngine:
    return new_tiny_engine()


@pytest.fixture(scope="session")
def tiny_engine_factory():
    """For tests that need an engine of their own (they change its configuration)."""
    return new_tiny_engine


@pytest.fixture(scope="session")
def int8_engine(int8_kernel) -> LLMEngine:
    """The tiny preset with int8 weights through the C++ kernel, shared by the int8 tests (the
    C++ and the Triton kernel's)."""
    return new_tiny_engine(weight_format="int8")


@pytest.fixture
def engine(tiny_engine: LLMEngine) -> LLMEngine:
    """The shared tiny engine, checked to hold no blocks before and after each test."""
    assert tiny_engine.blocks.num_used == 0
    yield tiny_engine
    assert tiny_engine.blocks.num_used == 0, "a test left KV blocks allocated"


@pytest.fixture(scope="session")
def cpp_kernel():
    """The C++ decode-attention kernel, built once into the tests' own cache ($LLM_SPEED_CACHE);
    the tests that need it are skipped where it cannot be built (failed in CI:
    helpers.kernel_or_skip)."""
    kernel_or_skip(PAGED_DECODE)
    return paged_decode_kernel()
