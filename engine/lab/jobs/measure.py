"""Jobs that measure single engine steps, one point of a chart each.

- `sweep_point`: one batch size of the batch-size sweep (engine.sweep): TTFT, the median decode
  step (TPOT), tokens/s, KV bytes, bytes and FLOPs per step, and the path it was measured on
  ("plain" before the app's set-up has built the kernels: LLMEngine.path). With `shared_prompt`
  (the knob's points) the batch shares one prompt, prefilled once and copied: the decode steps
  are the same work and the point costs the worker a fraction of a batched prefill.
- `prefill_point`: time prefill passes of one prompt length; FLOPs and bytes from the preset's
  shape (engine.calc.step_cost), so the pass can be placed on the roofline.
- `kv_allocation`: build the engine's paged KV cache (engine.model.kv_cache.PagedKVCache) for every
  preset in a few dtypes, for a small budget, and report what it really allocated. Only the
  cache is built, never the model, so the large preset costs a few MiB.
"""

from __future__ import annotations

import statistics
import time

import torch

from ...calc.step_cost import prefill_cost
from ...config import PRESETS
from ...device import resolve_device, torch_dtype
from ...model.kv_cache import PagedKVCache
from ...sweep import measure_point, sweep_prompts
from ..control import Control
from ..quality import spread
from ..registry import Emit
from .engines import engine_from_params, fit_kv
from .serving import Every

PROGRESS_EVERY_S = 0.1  # a point's progress events: at most this often, and its last step


def sweep_point_job(params: dict, emit: Emit, control: Control) -> dict | None:
    """One batch size of the sweep: TTFT, median decode step (TPOT), tokens/s, KV bytes."""
    return measure_sweep_point(engine_from_params(params), params, emit, control)


def measure_sweep_point(engine, params: dict, emit: Emit, control: Control) -> dict | None:
    """A sweep point's result on the engine given (the quantization lesson's int8_point job
    measures one on an engine with int8 weights)."""
    fit_kv(engine, [params["prompt_len"] + params["new_tokens"]] * params["batch_size"])

    on_step = progress_every(emit, PROGRESS_EVERY_S)

    point = measure_point(engine, params["batch_size"], params["prompt_len"],
                          params["new_tokens"], params["seed"], on_step=on_step,
                          cancelled=control, shared_prompt=params.get("shared_prompt", False))
    if point is None:
        return None
    steps = {"what": "decode step", "count": point.decode_steps_timed, "p10": point.step_ms_p10,
             "p50": point.tpot_ms, "p90": point.step_ms_p90}  # the sweep's own deciles
    return {"device": engine.device, "preset": params["preset"],
            "weights": engine.model_config.weights, "backend": engine.backend,
            "path": engine.path, "weight_bytes": engine.model.weight_bytes(),
            **point.to_dict(), "spread": steps}


def progress_every(emit: Emit, every_s: float):
    """on_step(done, total) that sends a "progress" event at most every every_s, and at the
    last step. A knob point's decode steps take about a millisecond each on tiny: an event for
    each would be dozens a point, each one crossing to the web process and redrawing its
    reader's status on the class's busiest core. Called between timed steps, never inside one."""
    every = Every(every_s)

    def on_step(done: int, total: int) -> None:
        if every.due() or done == total:
            emit("progress", {"done": done, "total": total})

    return on_step


# ---- prefill on the roofline --------------------------------------------------------------------
def engine_shape(engine) -> dict:
    """The preset's shape as `info` describes it, with the weight bytes counted from the
    model's own tensors."""
    shape = engine.model_config.describe(engine.device)
    shape["weight_bytes"] = engine.model.weight_bytes()
    return shape


def prefill_point_job(params: dict, emit: Emit, control: Control) -> dict | None:
    """Prefill passes of batch_size prompts of prompt_len tokens: median time, FLOPs, bytes."""
    batch, prompt_len, repeats = params["batch_size"], params["prompt_len"], params["repeats"]
    engine = engine_from_params(params)
    fit_kv(engine, [prompt_len] * batch)
    engine.check_fits(batch, prompt_len)
    engine.warm_up()
    prompts = sweep_prompts(engine.tokenizer.vocab_size, batch, prompt_len, params["seed"])
    times: list[float] = []
    for attempt in range(repeats + 1):  # the first pass at a new length is a warm-up
        if control.cancelled():
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
        "path": engine.path, "dtype": shape["dtype"], "batch_size": batch, "prompt_len": prompt_len,
        "ms": 1000 * seconds, "ms_all": [1000 * t for t in times],
        "flops": cost.flops, "bytes": cost.bytes, "intensity": cost.intensity,
        "achieved_gflops": cost.achieved_gflops(seconds),
        "tokens_per_s": batch * prompt_len / seconds,
        "weight_bytes": shape["weight_bytes"], "kv_bytes_per_token": shape["kv_bytes_per_token"],
        "spread": spread([1000 * t for t in times], "prefill pass"),
    }


# ---- what the engine's KV cache really allocates -------------------------------------------------
KV_DTYPES = ("engine", "float16", "float8_e4m3fn")


def kv_allocation_job(params: dict, emit: Emit, control: Control) -> dict:
    """Build each preset's paged KV cache (no model) in the engine's dtype, fp16 and fp8, for
    `blocks` blocks, and report the bytes its tensors really occupy."""
    device = resolve_device(params["device"])
    blocks, block_size = params["blocks"], params["block_size"]
    rows = []
    for name, cfg in PRESETS.items():
        for which in KV_DTYPES:
            dtype = torch_dtype(cfg.dtype_name(device)) if which == "engine" else \
                getattr(torch, which, None)
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
    return {"device": device, "blocks": blocks, "block_size": block_size, "caches": rows,
            "spread": None}  # nothing timed
