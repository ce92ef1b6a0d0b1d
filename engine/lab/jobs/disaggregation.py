"""The disaggregation lesson's measurement: one mixed workload (short and long prompts, Poisson
arrivals) served three ways on the same engine: colocated with whole-prompt prefill, colocated
with chunked prefill (both live), and disaggregated (engine.disagg: live where this process has
two cores, else replayed on costs measured here and labelled so)."""

from __future__ import annotations

from ...calc.disaggregation import ARMS
from ...disagg.serve import choose_mode, run_disaggregated
from ...lab.cores import available_cores
from ...scheduler import SchedulerConfig
from ...serve.loop import run
from ..control import Control
from ..registry import Emit
from .engines import engine_from_params, fit_kv, resident_lengths
from .serving import mixed_workload, step_spread

LIVE = "measured live"
COMPUTED = "computed from measured step costs (replay)"


def disaggregation_job(params: dict, emit: Emit, control: Control) -> dict | None:
    """The workload colocated (whole prompts, chunked) and disaggregated: each arm's metrics
    and every request's TTFT, largest gap and handover."""
    count, max_batch = params["requests"], params["max_batch"]
    short = (params["short_prompt"], params["short_output"])
    long = (params["long_prompt"], params["long_output"])
    slo = {"slo_ttft_ms": params["slo_ttft_ms"], "slo_tpot_ms": params["slo_tpot_ms"]}
    engine = engine_from_params(params)
    requests, sizes = mixed_workload(engine.tokenizer, params["rate"], count,
                                     params["long_share"], short, long, params["seed"])
    fit_kv(engine, resident_lengths(requests, max_batch))
    arms, steps = [], []
    for i, (arm, chunk) in enumerate(zip(ARMS, (0, params["chunk_size"], 0))):
        emit("progress", {"done": i, "total": len(ARMS), "message": f"serving it {arm}"})
        config = SchedulerConfig("continuous", max_batch=max_batch, chunk_size=chunk)
        if arm == "disaggregated":
            mode = choose_mode(params["mode"], available_cores())
            result = run_disaggregated(engine.config, requests, config, mode, engine=engine,
                                       **slo)
            info = result.extra["disaggregation"]
            how, label, handovers = (LIVE if mode == "live" else COMPUTED, info["label"],
                                     info["handover_ms"])
        else:
            result = run(engine, requests, config, cancelled=control, **slo)
            if result.cancelled:
                return None
            how, label, handovers = LIVE, f"{LIVE} on one engine", [None] * count
            steps += result.steps
        if control.cancelled():
            return None
        out = result.to_json()
        arms.append({"arm": arm, "how": how, "label": label, "chunk_size": chunk,
                     "metrics": out["metrics"],
                     "requests": [_request(r, size, h)
                                  for r, size, h in zip(out["requests"], sizes, handovers)]})
        if arm == "disaggregated":
            costs = info.get("measured", {}).get("costs", {})
    emit("progress", {"done": len(ARMS), "total": len(ARMS), "message": "served"})
    return {
        "device": engine.device, "preset": params["preset"],
        "weights": "random" if params["random_weights"] else engine.model_config.weights,
        "max_batch": max_batch,
        "kv_bytes_per_token": engine.cache.bytes_per_token,
        "workload": {"kind": "poisson mix", "rate": params["rate"], "requests": count,
                     "long_share": params["long_share"], "short_prompt": list(short[0]),
                     "short_output": list(short[1]), "long_prompt": list(long[0]),
                     "long_output": list(long[1]), "seed": params["seed"], "users": 0},
        "arms": arms,
        "costs": costs,
        "spread": step_spread(steps),  # the colocated runs' engine steps
    }


def _request(r: dict, size: str, handover_ms: float | None) -> dict:
    gaps = [b - a for a, b in zip(r["token_s"], r["token_s"][1:])]
    return {"id": r["id"], "size": size, "prompt_len": r["prompt_len"],
            "ttft_ms": 1000 * (r["first_token_s"] - r["arrival_s"]),
            "itl_max_ms": 1000 * max(gaps) if gaps else None, "handover_ms": handover_ms}
