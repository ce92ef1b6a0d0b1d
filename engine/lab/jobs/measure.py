"""Engine-service jobs behind lessons 5 to 8 (the roofline, the KV cache, goodput and cost).

- `prefill_point`: time prefill passes of one prompt length; FLOPs and bytes from the preset's
  shape (engine.calc.step_cost), so the pass can be placed on the roofline.
- `kv_allocation`: build the engine's paged KV cache (engine.model.kv_cache.PagedKVCache) for every
  preset in a few dtypes, for a small budget, and report what it really allocated. Only the
  cache is built, never the model, so the large preset costs a few MiB.
- `block_snapshots`: serve a small seeded workload and record, after every step, which physical
  KV blocks each live sequence holds (its block table).
- `rate_sweep`: serve the same kind of Poisson workload at several request rates and report,
  per rate, each request's TTFT, TPOT and E2E (so targets can be applied afterwards, in the page)
  with the run's throughput.

Imported by the worker and the web process (jobs.JOB_MODULES); torch only inside the functions.
"""

from __future__ import annotations

import statistics
import time

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

PROGRESS_EVERY_S = 0.25  # progress events of serving jobs: a few a second, not one a step


class Every:
    """True at most once per period (the first call included)."""

    def __init__(self, period_s: float):
        self.period_s = period_s
        self._last = -float("inf")

    def due(self) -> bool:
        now = time.monotonic()
        if now - self._last >= self.period_s:
            self._last = now
            return True
        return False


# ---- prefill on the roofline --------------------------------------------------------------------
PREFILL_DEFAULTS = {**ENGINE_DEFAULTS, "prompt_len": 128, "batch_size": 1, "repeats": 3,
                    "seed": 0}


def engine_shape(engine) -> dict:
    """The preset's shape as `info` describes it, with the weight bytes counted from the
    model's own tensors."""
    shape = engine.model_config.describe(engine.device)
    shape["weight_bytes"] = engine.model.weight_bytes()
    return shape


@job("prefill_point", defaults=PREFILL_DEFAULTS)
def prefill_point_job(params: dict, emit: Emit, cancelled: Cancelled) -> dict | None:
    """Prefill passes of batch_size prompts of prompt_len tokens: median time, FLOPs, bytes."""
    from ..calc.step_cost import prefill_cost
    from ..sweep import sweep_prompts

    batch = int_param(params, "batch_size", 1, 256)
    repeats = int_param(params, "repeats", 1, 20)
    seed = int_param(params, "seed", 0)
    engine = engine_from_params(params)
    context = engine.model_config.context
    prompt_len = int_param(params, "prompt_len", 1, context - 1)
    engine.check_fits(batch, prompt_len)
    engine.warm_up()
    prompts = sweep_prompts(engine.tokenizer.vocab_size, batch, prompt_len, seed)
    times: list[float] = []
    for attempt in range(repeats + 1):  # the first pass at a new length is a warm-up
        if cancelled():
            return None
        seqs = [engine.new_sequence(p, 1, ignore_eos=True) for p in prompts]
        try:
            for seq in seqs:
                engine.reserve(seq, prompt_len)
            start = time.perf_counter()
            engine.step([], [(seq, prompt_len) for seq in seqs])
            seconds = time.perf_counter() - start
        finally:
            for seq in seqs:
                engine.release(seq)
        if attempt:
            times.append(seconds)
        emit("progress", {"done": attempt + 1, "total": repeats + 1,
                          "message": f"prefill of {prompt_len} tokens"})
    seconds = statistics.median(times)
    shape = engine_shape(engine)
    cost = prefill_cost(shape, prompt_len, batch)
    return {
        "device": engine.device, "preset": params["preset"],
        "weights": "random" if engine.config.random_weights else engine.model_config.weights,
        "dtype": shape["dtype"], "batch_size": batch, "prompt_len": prompt_len,
        "ms": 1000 * seconds, "ms_all": [1000 * t for t in times],
        "flops": cost.flops, "bytes": cost.bytes, "intensity": cost.intensity,
        "achieved_gflops": cost.achieved_gflops(seconds),
        "tokens_per_s": batch * prompt_len / seconds,
        "weight_bytes": shape["weight_bytes"], "kv_bytes_per_token": shape["kv_bytes_per_token"],
    }


# ---- what the engine's KV cache really allocates -------------------------------------------------
KV_DTYPES = ("engine", "float16", "float8_e4m3fn")


@job("kv_allocation", defaults={"device": "auto", "blocks": 4, "block_size": 16})
def kv_allocation_job(params: dict, emit: Emit, cancelled: Cancelled) -> dict:
    """Build each preset's paged KV cache (no model) in the engine's dtype, fp16 and fp8, for
    `blocks` blocks, and report the bytes its tensors really occupy."""
    import torch

    from ..config import PRESETS
    from ..device import resolve_device, torch_dtype
    from ..model.kv_cache import PagedKVCache

    device = resolve_device(choice_param(params, "device", ["auto", "cpu", "cuda"]))
    blocks = int_param(params, "blocks", 1, 64)
    block_size = int_param(params, "block_size", 1, 256)
    rows = []
    for name, cfg in PRESETS.items():
        for which in KV_DTYPES:
            dtype = torch_dtype(cfg.dtype_name(device)) if which == "engine" else getattr(torch, which, None)
            if dtype is None:  # an older torch without fp8
                continue
            per_block = cfg.kv_bytes_per_token(dtype.itemsize) * block_size
            cache = PagedKVCache(cfg, blocks * per_block, block_size, dtype, device)
            rows.append({
                "preset": name, "dtype": str(dtype).removeprefix("torch."),
                "engine_dtype": which == "engine", "element_bytes": dtype.itemsize,
                "layers": cfg.layers, "kv_heads": cfg.kv_heads, "head_dim": cfg.head_dim,
                "num_blocks": cache.num_blocks, "block_size": cache.block_size,
                "capacity_tokens": cache.capacity_tokens,
                "allocated_bytes": cache.allocated_bytes,
                "bytes_per_token": cache.allocated_bytes // cache.capacity_tokens,
                "tensor_shape": list(cache.k.shape),
            })
            del cache
    return {"device": device, "blocks": blocks, "block_size": block_size, "caches": rows}


# ---- block tables of live sequences --------------------------------------------------------------
SNAPSHOT_DEFAULTS = {**ENGINE_DEFAULTS, "kv_budget_mib": 2, "requests": 10, "rate": 6.0,
                     "prompt_len": [16, 80], "output_len": [8, 48], "max_batch": 4,
                     "chunk_size": 64, "seed": 0}


def record_block_tables(engine, snapshots: list) -> object:
    """Wrap engine.step so that after every step the block table of each sequence in it is
    appended to snapshots; returns a function that removes the wrapper."""
    original = engine.step

    def step(decode, prefill, padding=0):
        tokens = original(decode, prefill, padding)
        seqs = [(s, "decode") for s in decode] + [(s, "prefill") for s, _ in prefill]
        snapshots.append({
            "seqs": [{"id": s.id, "blocks": list(s.block_table), "tokens": s.num_computed,
                      "phase": phase} for s, phase in seqs],
            "free": engine.blocks.num_free,
        })
        return tokens

    engine.step = step
    return lambda: engine.__dict__.pop("step", None)


@job("block_snapshots", defaults=SNAPSHOT_DEFAULTS)
def block_snapshots_job(params: dict, emit: Emit, cancelled: Cancelled) -> dict | None:
    """A small Poisson workload served for real, with every step's block tables recorded."""
    from ..serve.loop import run
    from ..serve.trace import StepEvent, TokenEvent
    from ..serve.workload import make_workload
    from .serving_jobs import scheduler_config, workload_spec

    int_param(params, "kv_budget_mib", 1, 64)
    spec = workload_spec({**params, "workload": "poisson", "burstiness": 1.0, "concurrency": 1,
                          "long_prompt_len": 1, "long_at": 0.0})
    config = scheduler_config({**params, "policy": "continuous", "timeout_ms": 0.0,
                               "max_tokens_per_step": None})
    spec.validate()
    config.validate()
    engine = engine_from_params(params)
    requests = make_workload(spec, engine.tokenizer)
    snapshots: list[dict] = []
    total = sum(r.output_len for r in requests)
    produced = [0]
    every = Every(PROGRESS_EVERY_S)

    def on_event(event) -> None:
        if isinstance(event, TokenEvent):
            produced[0] += 1
        elif isinstance(event, StepEvent):
            step = event.step
            snapshots[-1].update({"step": step.index, "t_s": step.end_s,
                                  "finished": list(step.finished_ids)})
            if every.due():
                emit("progress", {"done": min(produced[0], total), "total": total,
                                  "message": "serving"})

    unwrap = record_block_tables(engine, snapshots)
    try:
        result = run(engine, requests, config, on_event=on_event, cancelled=cancelled)
    finally:
        unwrap()
    if result.cancelled:
        return None
    return {
        "device": engine.device, "preset": params["preset"], "weights": result.weights,
        "num_blocks": engine.blocks.num_blocks, "block_size": engine.cache.block_size,
        "bytes_per_block": engine.cache.bytes_per_block,
        "kv_budget_mib": params["kv_budget_mib"],
        "requests": [{"id": r.id, "arrival_s": r.arrival_s, "finish_s": r.finish_s,
                      "prompt_len": r.prompt_len, "output_len": r.output_len,
                      "preemptions": r.preemptions} for r in result.requests],
        "snapshots": snapshots,
    }


# ---- throughput and per-request latencies against the request rate --------------------------------
RATE_DEFAULTS = {**ENGINE_DEFAULTS, "rates": [1.0, 2.0, 4.0, 8.0],
                 "requests": 24, "prompt_len": [32, 128], "output_len": [16, 64], "max_batch": 8,
                 "chunk_size": 128, "seed": 0}
MAX_RATES = 12


def rate_point(result, rate: float) -> dict:
    """One rate's figures from a run: per-request lists (for SLOs applied later) and totals."""
    from ..serve.metrics import e2e_ms, itl_ms, summarize, tpot_ms, ttft_ms

    done = [r for r in result.requests if r.finish_s is not None and r.token_s]
    m = result.metrics
    itl = summarize(gap for r in done for gap in itl_ms(r))
    return {
        "rate": rate, "requests": len(result.requests), "completed": m.completed,
        "duration_s": m.duration_s, "output_tokens": m.output_tokens,
        "throughput_tok_s": m.throughput_tok_s, "requests_per_s": m.requests_per_s,
        "ttft_ms": [ttft_ms(r) for r in done], "tpot_ms": [tpot_ms(r) for r in done],
        "e2e_ms": [e2e_ms(r) for r in done], "output_len": [len(r.token_s) for r in done],
        "itl_p50_ms": itl.p50, "itl_p99_ms": itl.p99, "itl_max_ms": itl.max,
        "preemptions": m.preemptions, "slot_use": m.slot_use,
    }


@job("rate_sweep", defaults=RATE_DEFAULTS)
def rate_sweep_job(params: dict, emit: Emit, cancelled: Cancelled) -> dict | None:
    """The same Poisson workload (one seed) served at each rate in turn; a "step" event with
    each rate's point as it finishes."""
    from ..serve.loop import run
    from ..serve.trace import StepEvent, TokenEvent
    from ..serve.workload import make_workload
    from .serving_jobs import scheduler_config, workload_spec

    rates = params["rates"]
    if not isinstance(rates, (list, tuple)) or not 1 <= len(rates) <= MAX_RATES:
        raise ConfigError(f"rates must be a list of 1 to {MAX_RATES} request rates")
    rates = [float_param({"rate": r}, "rate", 1e-3, 1000.0) for r in rates]
    config = scheduler_config({**params, "policy": "continuous", "timeout_ms": 0.0,
                               "max_tokens_per_step": None})
    specs = [workload_spec({**params, "workload": "poisson", "rate": rate, "burstiness": 1.0,
                            "concurrency": 1, "long_prompt_len": 1, "long_at": 0.0})
             for rate in rates]
    config.validate()
    for spec in specs:
        spec.validate()
    engine = engine_from_params(params)
    workloads = [make_workload(spec, engine.tokenizer) for spec in specs]
    total = sum(r.output_len for w in workloads for r in w)
    done = [0]
    every = Every(PROGRESS_EVERY_S)

    def on_event(event) -> None:
        if isinstance(event, TokenEvent):
            done[0] += 1
        elif isinstance(event, StepEvent) and every.due():
            emit("progress", {"done": min(done[0], total), "total": total,
                              "message": f"rate {rate:g} requests/s"})

    points = []
    for rate, requests in zip(rates, workloads, strict=True):
        result = run(engine, requests, config, on_event=on_event, cancelled=cancelled)
        if result.cancelled:
            return None
        point = rate_point(result, rate)
        points.append(point)
        emit("step", {"kind": "rate_point", **point})
    return {"device": engine.device, "preset": params["preset"],
            "weights": "random" if engine.config.random_weights else engine.model_config.weights,
            "max_batch": config.max_batch, "chunk_size": config.chunk_size,
            "workload": specs[0].to_json(), "points": points}
