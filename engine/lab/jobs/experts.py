"""The job of the experts lesson: `experts_point`, one batch size of the sweep on a
mixture-of-experts preset or its dense twin (engine.experts), with the distinct experts each
decode step read."""

from __future__ import annotations

from ...experts import measure_experts_point
from ..control import Control
from ..registry import Emit
from .engines import engine_from_params, fit_kv
from .measure import PROGRESS_EVERY_S, progress_every


def experts_point_job(params: dict, emit: Emit, control: Control) -> dict | None:
    """One batch size: the sweep point's fields and what its steps read of the experts."""
    engine = engine_from_params(params)
    fit_kv(engine, [params["prompt_len"] + params["new_tokens"]] * params["batch_size"])
    point = measure_experts_point(engine, params["batch_size"], params["prompt_len"],
                                  params["new_tokens"], params["seed"],
                                  on_step=progress_every(emit, PROGRESS_EVERY_S),
                                  cancelled=control)
    if point is None:
        return None
    out = point.to_dict()
    steps = {"what": "decode step", "count": out["decode_steps_timed"],
             "p10": out["step_ms_p10"], "p50": out["tpot_ms"], "p90": out["step_ms_p90"]}
    return {"device": engine.device, "preset": params["preset"],
            "weights": engine.model_config.weights, "backend": engine.backend,
            "path": engine.path, "weight_bytes": engine.model.weight_bytes(), **out,
            "spread": steps}
