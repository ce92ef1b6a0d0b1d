"""A whole-step plan for moe-tiny kept before its engine is built, for the tests that build one."""

from __future__ import annotations

from engine.config import get_preset
from engine.model.matmul_plan import TUNED_ROWS, matmul_plan, save_step_plan
from engine.model.model import LlamaModel


def seed_step_plan() -> None:
    """Keep the products' own plan as moe-tiny's whole-step plan on the torch backend, so the
    engine's build skips weighing it in timed steps (tens of seconds on a loaded machine): the
    tests here check what the engine computes, which no plan changes."""
    weights = [m.weight.detach() for m in LlamaModel(get_preset("moe-tiny")).planned_linears()]
    products = matmul_plan(weights)
    tuned = [products[rows - 1] for rows in TUNED_ROWS]
    save_step_plan(weights, "torch", tuned, [0.001 * (i + 1) for i in range(len(TUNED_ROWS))])
