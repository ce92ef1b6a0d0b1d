"""Whole-step plans for the small expert presets kept before their engines are built, for the
tests that build one."""

from __future__ import annotations

import torch

from engine.config import get_preset
from engine.llm_engine import default_backend
from engine.model.matmul_plan import TUNED_ROWS, matmul_plan, save_step_plan
from engine.model.model import LlamaModel


def seed_step_plan(preset: str = "moe-tiny", backend: str | None = None) -> None:
    """Keep the products' own plan as the preset's whole-step plan on `backend` (the CPU's
    default where None), so the engine's build skips weighing it in timed steps (tens of
    seconds on a loaded machine): the tests check what the engine computes, which no plan
    changes."""
    backend = backend or default_backend("cpu", torch.float32)
    weights = [m.weight.detach() for m in LlamaModel(get_preset(preset)).planned_linears()]
    products = matmul_plan(weights)
    tuned = [products[rows - 1] for rows in TUNED_ROWS]
    save_step_plan(weights, backend, tuned, [0.001 * (i + 1) for i in range(len(TUNED_ROWS))])
