"""The traffic-classes job (lesson 16): one mixed workload served four ways on one engine.

- fifo: chat requests and a batch job of long summaries through one first-come-first-served queue;
- lanes: the same requests with an interactive lane over a batch lane (strict priority, the batch
  lane limited to `batch_max_running` slots, prompts over `max_prompt` moved to the batch lane);
- flood: the lanes, with one more tenant flooding the interactive lane;
- quota: the same flood, with a token bucket per tenant in the interactive lane.

Each run is the real serving loop (engine.serve.loop.run) on the wall clock; the result keeps
every request's record (class, tenant, times, refusal), from which the page computes each class's
TTFT percentiles and the batch job's tokens per second (engine.calc.traffic).
"""

from __future__ import annotations

from ...scheduler import SchedulerConfig
from ...serve.loop import run
from ...serve.trace import RequestEvent
from ...traffic import parse_classes
from ...traffic_mix import MixSpec, make_mix
from ..control import Control
from ..registry import Emit
from .engines import engine_from_params, fit_kv, resident_lengths
from .serving import step_spread

RUNS = ("fifo", "lanes", "flood", "quota")


def lane_specs(params: dict) -> tuple[str, str]:
    """The --classes text of the lanes, and of the lanes with the tenants' quota."""
    lanes = (f"interactive:priority=2,max_prompt={params['max_prompt']};"
             f"batch:priority=1,max_running={params['batch_max_running']}")
    quota = lanes.replace(
        ";", f",tenant_rate={params['tenant_rate']:g},tenant_burst={params['tenant_burst']:g};")
    return lanes, quota


def mix_specs(params: dict) -> tuple[MixSpec, MixSpec]:
    """The mix without the flood, and with it (the same chat and batch requests)."""
    base = MixSpec(chat_requests=params["chat_requests"], chat_rate=params["chat_rate"],
                   chat_prompt=tuple(params["chat_prompt"]),
                   chat_output=tuple(params["chat_output"]), users=params["users"],
                   batch_requests=params["batch_requests"],
                   batch_prompt=tuple(params["batch_prompt"]),
                   batch_output=tuple(params["batch_output"]), flood_requests=0,
                   flood_rate=params["flood_rate"], seed=params["seed"])
    flooded = MixSpec(**{**base.__dict__, "flood_requests": params["flood_requests"]})
    return base, flooded


def traffic_classes_job(params: dict, emit: Emit, control: Control) -> dict | None:
    """The four runs in turn; a "progress" event as requests finish, a "step" event with each
    run's name as it ends."""
    engine = engine_from_params(params)
    base, flooded = mix_specs(params)
    lanes, quota = lane_specs(params)
    plans = [("fifo", base, None), ("lanes", base, lanes), ("flood", flooded, lanes),
             ("quota", flooded, quota)]
    workloads = [make_mix(spec, engine.tokenizer) for _, spec, _ in plans]
    fit_kv(engine, resident_lengths(workloads[-1], params["max_batch"]))
    total = sum(len(w) for w in workloads)
    done = [0]

    def on_event(event) -> None:
        if isinstance(event, RequestEvent) and event.kind in ("finished", "refused"):
            done[0] += 1
            emit("progress", {"done": done[0], "total": total,
                              "message": f"requests answered ({name} run)"})

    runs, steps = [], []
    for (name, spec, classes), requests in zip(plans, workloads, strict=True):
        config = SchedulerConfig(
            policy="continuous", max_batch=params["max_batch"], chunk_size=params["chunk_size"],
            traffic=None if classes is None else parse_classes(classes))
        result = run(engine, requests, config, on_event=on_event, cancelled=control)
        if result.cancelled:
            return None
        steps += result.steps
        runs.append({"name": name, "classes": classes, "flood_requests": spec.flood_requests,
                     "duration_s": max((r.finish_s for r in result.requests
                                        if r.finish_s is not None), default=0.0),
                     "requests": [r.to_json() for r in result.requests]})
        emit("step", {"kind": "traffic_run", "name": name})
    return {"device": engine.device, "preset": params["preset"],
            "weights": "random" if engine.config.random_weights else engine.model_config.weights,
            "max_batch": params["max_batch"], "chunk_size": params["chunk_size"],
            "workload": flooded.to_json(), "lanes": lanes, "quota": quota, "runs": runs,
            "spread": step_spread(steps)}
