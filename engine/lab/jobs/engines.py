"""The engines a worker keeps, so that the next sweep point does not reload the model."""

from __future__ import annotations

from ...config import EngineConfig
from ...llm_engine import LLMEngine

MAX_ENGINES = 2
_engines: dict[tuple, LLMEngine] = {}


def engine_for(preset: str, device: str = "auto", backend: str = "auto",
               kv_budget_mib: int | None = None, random_weights: bool = False,
               prefix_caching: bool = False) -> LLMEngine:
    """The worker's engine for these settings, built on first use and kept (the MAX_ENGINES most
    recently used), warmed up so no first-call cost lands in a measurement. Prefix caching is
    off except for the prefix cache lesson's job, which asks for an engine of its own."""
    key = (preset, device, backend, kv_budget_mib, random_weights, prefix_caching)
    engine = _engines.pop(key, None)
    if engine is None:
        while len(_engines) >= MAX_ENGINES:
            _engines.pop(next(iter(_engines)))  # the least recently used
        engine = LLMEngine(EngineConfig(
            preset=preset, device=device, backend=backend, random_weights=random_weights,
            prefix_caching=prefix_caching,
            kv_budget_bytes=kv_budget_mib * 2**20 if kv_budget_mib else None,
        ))
        engine.warm_up()
    _engines[key] = engine  # most recently used last
    return engine


def engine_from_params(params: dict) -> LLMEngine:
    """The engine a job's checked parameters ask for (registry.ENGINE's names)."""
    return engine_for(params["preset"], params["device"], params["backend"],
                      params["kv_budget_mib"], params["random_weights"])
