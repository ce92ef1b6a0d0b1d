"""Engine-service jobs that run the real-time serving loop (engine.serve.loop.run).

`serve_run` is the `python -m engine run` command as a job: a seeded workload served under a
policy, with each step and token streamed as events while it runs, and the run's JSON (the
command's shape) as the result. Lessons that need a custom request list build on `run_requests`.
Imported by the worker (through jobs.JOB_MODULES); torch is only imported inside the functions.
"""

from __future__ import annotations

import math

from ..errors import ConfigError
from .jobs import (
    ENGINE_DEFAULTS,
    Cancelled,
    Emit,
    choice_param,
    engine_from_params,
    float_param,
    int_param,
    job,
)

SERVE_DEFAULTS = {
    **ENGINE_DEFAULTS,
    "policy": "continuous", "workload": "poisson", "rate": "inf", "burstiness": 1.0,
    "requests": 16, "concurrency": 4, "prompt_len": [32, 128], "output_len": [16, 64],
    "long_prompt_len": 1536, "long_at": 0.2, "max_batch": 8, "timeout_ms": 50.0,
    "chunk_size": 128, "max_tokens_per_step": None, "slo_ttft_ms": None, "slo_tpot_ms": None,
    "seed": 0, "stream_tokens": True,
}


def _rate(params: dict) -> float:
    value = params["rate"]
    if value in ("inf", None) or (isinstance(value, float) and math.isinf(value)):
        return math.inf
    return float_param(params, "rate", 1e-6)


def _length_range(params: dict, name: str) -> tuple[int, int]:
    value = params[name]
    if isinstance(value, int) and not isinstance(value, bool):
        value = [value, value]
    if not (isinstance(value, (list, tuple)) and len(value) == 2
            and all(isinstance(v, int) and not isinstance(v, bool) for v in value)):
        raise ConfigError(f"{name.replace('_', ' ')} must be a whole number or [A, B]")
    low, high = value
    if not 1 <= low <= high:
        raise ConfigError(f"{name.replace('_', ' ')} range {low}:{high} must satisfy 1 <= A <= B")
    return low, high


def _optional_ms(params: dict, name: str) -> float | None:
    return None if params[name] is None else float_param(params, name, 0.0)


def scheduler_config(params: dict):
    from ..scheduler import SchedulerConfig

    budget = params["max_tokens_per_step"]
    return SchedulerConfig(
        policy=choice_param(params, "policy", ["static", "dynamic", "continuous"]),
        max_batch=int_param(params, "max_batch", 1, 256),
        timeout_ms=float_param(params, "timeout_ms", 0.0),
        chunk_size=int_param(params, "chunk_size", 0),
        max_tokens_per_step=None if budget is None else int_param(params, "max_tokens_per_step", 1),
    )


def workload_spec(params: dict):
    from ..serve.workload import WORKLOADS, WorkloadSpec

    return WorkloadSpec(
        kind=choice_param(params, "workload", list(WORKLOADS)),
        requests=int_param(params, "requests", 1, 10_000),
        rate=_rate(params),
        burstiness=float_param(params, "burstiness", 1e-6),
        concurrency=int_param(params, "concurrency", 1, 1024),
        prompt_len=_length_range(params, "prompt_len"),
        output_len=_length_range(params, "output_len"),
        long_prompt_len=int_param(params, "long_prompt_len", 1),
        long_at_s=float_param(params, "long_at", 0.0),
        seed=int_param(params, "seed", 0),
    )


def run_requests(engine, requests, config, emit: Emit, cancelled: Cancelled,
                 slo_ttft_ms=None, slo_tpot_ms=None, stream_tokens: bool = True,
                 extra: dict | None = None) -> dict | None:
    """Serve requests, streaming "step", "request" (arrived, admitted, preempted, finished) and,
    if stream_tokens, "token" events, each with event_to_json's fields; returns the run's JSON."""
    from ..serve.loop import run
    from ..serve.trace import RequestEvent, StepEvent, TokenEvent, event_to_json

    def on_event(event) -> None:
        if isinstance(event, TokenEvent) and not stream_tokens:
            return
        kind = "step" if isinstance(event, StepEvent) else \
            "request" if isinstance(event, RequestEvent) else "token"
        emit(kind, event_to_json(event))

    result = run(engine, requests, config, on_event=on_event, cancelled=cancelled,
                 slo_ttft_ms=slo_ttft_ms, slo_tpot_ms=slo_tpot_ms,
                 stream_text=stream_tokens)
    if result.cancelled:
        return None
    result.extra.update(extra or {})
    return result.to_json()


@job("serve_run", defaults=SERVE_DEFAULTS)
def serve_run_job(params: dict, emit: Emit, cancelled: Cancelled) -> dict | None:
    """A seeded workload served in real time under a batching policy (`python -m engine run`)."""
    from ..serve.workload import make_workload

    spec = workload_spec(params)
    config = scheduler_config(params)
    spec.validate()
    config.validate()
    engine = engine_from_params(params)
    requests = make_workload(spec, engine.tokenizer)
    return run_requests(
        engine, requests, config, emit, cancelled,
        slo_ttft_ms=_optional_ms(params, "slo_ttft_ms"),
        slo_tpot_ms=_optional_ms(params, "slo_tpot_ms"),
        stream_tokens=bool(params["stream_tokens"]), extra={"workload": spec.to_json()},
    )
