"""The job of the batch-invariance lesson: one greedy prompt alone and inside batches of other
requests, compared bit by bit (engine.invariance), in the engine's default mode or its
batch-invariant one. The engine is the shared one of its settings; the mode is the runner's,
switched for this job only (engine.invariance.batch_invariant)."""

from __future__ import annotations

from ...invariance import measure_invariance
from ..control import Control
from ..registry import Emit
from .engines import engine_from_params, fit_kv


def held_tokens(params: dict) -> int:
    """The most KV positions one row of a batch holds: the others' prompts are drawn up to twice
    the prompt's length (engine.invariance.company), and every row runs the prompt's decode
    steps and its chunks (engine.invariance.run_prompt)."""
    chunks = -(-params["prompt_len"] // params["chunk"]) if params["chunk"] else 0
    return 2 * params["prompt_len"] + params["new_tokens"] + chunks + 1


def invariance_job(params: dict, emit: Emit, control: Control) -> dict | None:
    """Each batch size in turn; a "step" event with each one's record as it is done."""
    engine = engine_from_params(params)
    sizes = params["batch_sizes"]
    fit_kv(engine, [held_tokens(params)] * max(sizes))
    done = 0

    def on_point(point) -> None:
        nonlocal done
        done += 1
        emit("step", point.to_dict())
        emit("progress", {"done": done, "total": len(sizes), "message": "batch sizes compared"})

    emit("progress", {"done": 0, "total": len(sizes), "message": "batch sizes compared"})
    result = measure_invariance(engine, sizes, params["seeds"], params["prompt_len"],
                                params["new_tokens"], params["chunk"],
                                invariant=params["batch_invariant"], seed=params["seed"],
                                on_point=on_point, cancelled=control)
    return None if result is None else result.to_dict()
