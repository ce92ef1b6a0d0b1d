"""The jobs the engine service's worker runs: one function per kind, found by name in `JOBS`.

A job function takes (params, emit, cancelled) and returns a JSON-ready dict:
- params: the job's parameters with the kind's defaults filled in (see `normalize`);
- emit(type, data): send an event to whoever submitted the job ("progress", "token", "step", ...);
- cancelled(): True once the job has been cancelled; long jobs poll it and return None early.
It validates its parameters and raises engine.config.ConfigError with a one-line message for bad
values. Register a new kind with the `@job("kind", defaults={...})` decorator, here or in a module
listed in `JOB_MODULES`.

This module imports nothing heavy at the top: the web process imports it to fill in defaults and
to know which kinds exist, and only the worker process may import torch (inside the functions).
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..errors import ConfigError

Emit = Callable[[str, dict], None]
Cancelled = Callable[[], bool]
JobFn = Callable[[dict, Emit, Cancelled], "dict | None"]

# Modules that register more job kinds with @job; the worker and the web process import them all.
JOB_MODULES: list[str] = ["engine.lab.serving_jobs", "engine.lab.measure_jobs", "engine.lab.lesson_jobs_1_4"]


@dataclass(frozen=True)
class JobSpec:
    """A job kind: its function, the parameters it accepts with their defaults, and whether its
    results may be served from the measurement cache."""

    kind: str
    fn: JobFn
    defaults: dict[str, Any] = field(default_factory=dict)
    cacheable: bool = True
    doc: str = ""


JOBS: dict[str, JobSpec] = {}


def job(kind: str, defaults: dict[str, Any] | None = None,
        cacheable: bool = True) -> Callable[[JobFn], JobFn]:
    """Register fn as the function for `kind` (a decorator)."""
    def register(fn: JobFn) -> JobFn:
        JOBS[kind] = JobSpec(kind, fn, dict(defaults or {}), cacheable,
                             (fn.__doc__ or "").strip().split("\n")[0])
        return fn
    return register


def load_job_modules() -> None:
    for name in JOB_MODULES:
        importlib.import_module(name)


def get_spec(kind: str) -> JobSpec:
    """The spec of a kind; a ValueError naming the known kinds otherwise."""
    load_job_modules()
    try:
        return JOBS[kind]
    except KeyError:
        raise ValueError(f"unknown job kind {kind!r}: choose one of {', '.join(sorted(JOBS))}") \
            from None


def normalize(kind: str, params: dict | None) -> dict:
    """The params with the kind's defaults filled in, so that {} and the explicit defaults share
    one cache entry; an unknown parameter is refused (a typo must not silently use a default)."""
    spec = get_spec(kind)
    params = dict(params or {})
    unknown = sorted(set(params) - set(spec.defaults))
    if unknown:
        allowed = ", ".join(sorted(spec.defaults)) or "none"
        raise ValueError(f"{kind}: unknown parameter {unknown[0]!r} (allowed: {allowed})")
    return {**spec.defaults, **params}


def run(kind: str, params: dict, emit: Emit, cancelled: Cancelled) -> dict | None:
    """Run one job in this process (the worker); returns None when it was cancelled."""
    return get_spec(kind).fn(normalize(kind, params), emit, cancelled)


# ---- parameter checks: each raises ConfigError naming the limit ------------------------------
def int_param(params: dict, name: str, lo: int, hi: int | None = None) -> int:
    value = params[name]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or int(value) != value:
        raise ConfigError(f"{name} must be a whole number (got {value!r})")
    value = int(value)
    if value < lo or (hi is not None and value > hi):
        limit = f"at least {lo}" if hi is None else f"between {lo} and {hi}"
        raise ConfigError(f"{name} must be {limit} (got {value})")
    return value


def float_param(params: dict, name: str, lo: float, hi: float | None = None) -> float:
    value = params[name]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ConfigError(f"{name} must be a number (got {value!r})")
    if value < lo or (hi is not None and value > hi):
        limit = f"at least {lo}" if hi is None else f"between {lo} and {hi}"
        raise ConfigError(f"{name} must be {limit} (got {value})")
    return float(value)


def choice_param(params: dict, name: str, choices) -> str:
    value = params[name]
    if value not in choices:
        raise ConfigError(f"{name} must be one of {', '.join(map(str, choices))} (got {value!r})")
    return value


def preset_param(params: dict) -> str:
    from ..config import PRESETS

    return choice_param(params, "preset", list(PRESETS))


# ---- engines, kept per worker so that a sweep point does not reload the model -----------------
MAX_ENGINES = 2
_engines: dict[tuple, Any] = {}


def engine_for(preset: str, device: str = "auto", backend: str = "auto",
               kv_budget_mib: int | None = None, random_weights: bool = False):
    """The worker's engine for these settings, built on first use and kept (the MAX_ENGINES most
    recently used), warmed up so no first-call cost lands in a measurement."""
    from ..config import EngineConfig
    from ..llm_engine import LLMEngine

    key = (preset, device, backend, kv_budget_mib, random_weights)
    engine = _engines.pop(key, None)
    if engine is None:
        while len(_engines) >= MAX_ENGINES:
            _engines.pop(next(iter(_engines)))  # the least recently used
        engine = LLMEngine(EngineConfig(
            preset=preset, device=device, backend=backend, random_weights=random_weights,
            kv_budget_bytes=kv_budget_mib * 2**20 if kv_budget_mib else None,
        ))
        engine.warm_up()
    _engines[key] = engine  # most recently used last
    return engine


ENGINE_DEFAULTS = {"preset": "tiny", "device": "auto", "backend": "auto", "kv_budget_mib": None,
                   "random_weights": False}


def engine_from_params(params: dict):
    preset = preset_param(params)
    device = choice_param(params, "device", ["auto", "cpu", "cuda"])
    backend = choice_param(params, "backend", ["auto", "torch", "triton"])
    budget = None if params["kv_budget_mib"] is None else int_param(params, "kv_budget_mib", 1)
    if not isinstance(params["random_weights"], bool):
        raise ConfigError("random_weights must be true or false")
    return engine_for(preset, device, backend, budget, params["random_weights"])


# ---- info --------------------------------------------------------------------------------------
def machine_info(device: str = "auto", refresh: bool = False) -> dict:
    """What `python -m engine info --json` prints: the device, thread count, every preset's shape
    and the device's measured memory bandwidth and matmul peak (cached per machine)."""
    import torch

    from ..config import PRESETS
    from ..device import configure_threads, describe_device, resolve_device
    from ..hardware import hardware_limits

    device = resolve_device(device)
    if device == "cpu":
        configure_threads()
    limits = hardware_limits(device, refresh=refresh)
    return {
        "device": device,
        "device_name": describe_device(device),
        "torch": str(torch.__version__),
        "threads": torch.get_num_threads(),
        "presets": [cfg.describe(device) for cfg in PRESETS.values()],
        "memory_bandwidth_gbs": limits.memory_bandwidth_gbs,
        "matmul_gflops": limits.matmul_gflops,
        "matmul_dtype": limits.matmul_dtype,
        "ridge_flop_per_byte": round(limits.ridge_flop_per_byte, 2),
        "limits_measured_at": limits.measured_at,
    }


@job("info", defaults={"device": "auto"})
def info_job(params: dict, emit: Emit, cancelled: Cancelled) -> dict:
    """The machine: device, threads, presets, measured memory bandwidth and matmul peak."""
    device = choice_param(params, "device", ["auto", "cpu", "cuda"])
    emit("progress", {"done": 0, "total": 1, "message": "measuring memory bandwidth and matmul"})
    return machine_info(device)


# ---- one point of the batch-size sweep ---------------------------------------------------------
@job("sweep_point", defaults={**ENGINE_DEFAULTS, "batch_size": 1, "prompt_len": 128,
                               "new_tokens": 32, "seed": 0})
def sweep_point_job(params: dict, emit: Emit, cancelled: Cancelled) -> dict | None:
    """One batch size of the sweep: TTFT, median decode step (TPOT), tokens/s, KV bytes."""
    from ..sweep import measure_point

    batch = int_param(params, "batch_size", 1, 4096)
    prompt_len = int_param(params, "prompt_len", 1)
    new_tokens = int_param(params, "new_tokens", 1)
    seed = int_param(params, "seed", 0)
    engine = engine_from_params(params)

    def on_step(done: int, total: int) -> None:
        emit("progress", {"done": done, "total": total})

    point = measure_point(engine, batch, prompt_len, new_tokens, seed, on_step=on_step,
                          cancelled=cancelled)
    if point is None:
        return None
    return {"device": engine.device, "preset": params["preset"],
            "weights": engine.model_config.weights, "backend": engine.backend,
            "weight_bytes": engine.model.weight_bytes(), **point.to_dict()}


# ---- streamed generation -----------------------------------------------------------------------
@job("generate", cacheable=False, defaults={
    **ENGINE_DEFAULTS, "prompt": "", "max_new_tokens": 64, "temperature": 0.0, "top_k": 0,
    "top_p": 1.0, "seed": 0})
def generate_job(params: dict, emit: Emit, cancelled: Cancelled) -> dict | None:
    """One prompt, streamed: a "token" event per token with its text and engine time.

    Not cacheable: its point is watching tokens arrive live, and a reader's own text is not kept.
    """
    from ..generate import generate
    from ..sampler import SamplingParams

    prompt = params["prompt"]
    if not isinstance(prompt, str) or not prompt.strip():
        raise ConfigError("the prompt is empty: give some text")
    max_new = int_param(params, "max_new_tokens", 1)
    sampling = SamplingParams(float_param(params, "temperature", 0.0),
                              int_param(params, "top_k", 0),
                              float_param(params, "top_p", 0.0, 1.0),
                              int_param(params, "seed", 0))
    sampling.validate()
    engine = engine_from_params(params)
    ids = engine.tokenizer.encode(prompt)

    def on_token(event) -> None:
        emit("token", {"index": event.index, "text": event.text, "t_s": event.t_s})

    [gen] = generate(engine, [ids], max_new, sampling, on_token=on_token, cancelled=cancelled)
    if cancelled():
        return None
    return {
        "device": engine.device,
        "preset": params["preset"],
        "weights": engine.model_config.weights,
        "prompt": prompt,
        "prompt_tokens": len(ids),
        "text": gen.text,
        "tokens": [{"text": piece, "t_s": t} for piece, t in zip(gen.pieces, gen.token_times, strict=True)],
        "ttft_ms": gen.ttft_ms,
        "tpot_ms": gen.tpot_ms,
    }


# ---- the worker's hello --------------------------------------------------------------------------
def worker_identity() -> dict:
    """What the service keys cached results by: the device the worker runs on and the engine's
    version. Called once in a fresh worker (it imports torch)."""
    from ..device import describe_device, resolve_device
    from ..llm_engine import ENGINE_VERSION

    return {"device": describe_device(resolve_device("auto")), "engine_version": ENGINE_VERSION}
