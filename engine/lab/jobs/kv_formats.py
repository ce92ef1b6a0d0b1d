"""Lesson 6's KV formats, measured on the engine (the `kv_formats` job):

- FP8 against the engine's own float cache, on the trained tiny model: the blocks one KV budget
  really holds in each format (the pool the engine allocates) and the requests of a length that
  fit in it (engine.blocks_per_sequence); the decode step's time in each (engine.sweep, its
  timed steps' median with a 95% interval); and the quality (engine.kv_quality: held-out loss,
  top-1 agreement, the largest logit difference), computed directly on both caches.
- Hybrid attention: tiny-hybrid (every other layer windowed) against tiny's full attention, one
  sequence grown through each engine's own block manager to each context length, its prompt
  prefilled in chunks then one token a step, as the continuous scheduler grows it. Allocation
  does not depend on what the model computes, so no model runs for it: the figures are the
  blocks the allocator held (the most at once, and at the end), their bytes in the engine's
  pool, and the requests of that length the same budget admits.
"""

from __future__ import annotations

from ...calc.kv_formats import hybrid_bytes_per_token
from ...calc.stats import estimate
from ...config import EngineConfig
from ...kv_quality import kv_quality
from ...llm_engine import LLMEngine
from ...sweep import measure_point
from ..control import Control
from ..quality import spread
from ..registry import Emit

HYBRID, FULL = "tiny-hybrid", "tiny"


def format_row(engine: LLMEngine, params: dict, control: Control) -> dict | None:
    """One KV format on the engine: its pool, what fits, and its decode steps timed."""
    tokens = params["prompt_len"] + params["new_tokens"]
    each = engine.blocks_per_sequence(tokens, prefill=params["prompt_len"])
    point = measure_point(engine, params["batch_size"], params["prompt_len"],
                          params["new_tokens"], params["seed"], cancelled=control)
    if point is None:
        return None
    step = estimate(point.step_ms, 50)
    return {"kv_dtype": engine.config.kv_dtype if engine.config.kv_dtype == "fp8"
            else str(engine.cache.dtype).removeprefix("torch."),
            "bytes_per_block": engine.cache.bytes_per_block,
            "blocks": engine.cache.num_blocks, "allocated_bytes": engine.cache.allocated_bytes,
            "blocks_per_request": each, "requests_fit": engine.cache.num_blocks // each,
            "step_ms": step.value, "step_ms_lo": step.lo, "step_ms_hi": step.hi,
            "steps_timed": step.n, "step_ms_all": point.step_ms}


def grow(engine: LLMEngine, tokens: int, prompt: int, chunk: int) -> tuple[int, int]:
    """Grow one sequence to `tokens` positions through the engine's block manager (prompt in
    chunks, then a token a step), marking each step's tokens computed as a step would: (the most
    blocks it held at once, the blocks it holds at the end). Its blocks go back after."""
    blocks = engine.blocks
    seq = engine.new_sequence([1] * prompt, max(1, tokens - prompt), ignore_eos=True)
    most, done = 0, 0
    try:
        while done < tokens:
            new = min(chunk, prompt - done) if done < prompt else 1
            if not engine.reserve(seq, new):
                raise MemoryError(f"the pool cannot hold one {tokens}-token sequence")
            most = max(most, len(seq.block_table) + blocks.window_blocks(seq))
            seq.num_computed += new
            done += new
        return most, len(seq.block_table) + blocks.window_blocks(seq)
    finally:
        engine.release(seq)


def hybrid_rows(params: dict, budget: int, control: Control) -> list[dict] | None:
    """Full attention and the hybrid at each context length: bytes and requests that fit."""
    rows = []
    engines = {name: LLMEngine(EngineConfig(preset=name, device=params["device"],
                                            backend="torch", kv_budget_bytes=budget,
                                            random_weights=True))
               for name in (FULL, HYBRID)}
    for tokens in params["contexts"]:
        for name, engine in engines.items():
            if control.cancelled():
                return None
            prompt = min(params["hybrid_prompt"], tokens)
            most, held = grow(engine, tokens, prompt, params["chunk_size"])
            cfg, cache = engine.model_config, engine.cache
            element = cache.dtype.itemsize
            formula = hybrid_bytes_per_token(tokens, cfg.layers, cfg.kv_heads, cfg.head_dim,
                                             element, cache.block_size, cache.window) \
                if cache.window else cfg.kv_bytes_per_token(element)
            rows.append({"preset": name, "window": cache.window, "tokens": tokens,
                         "prompt": prompt, "blocks_held": held, "blocks_most": most,
                         "bytes_per_block": cache.bytes_per_block,
                         "kv_bytes": held * cache.bytes_per_block,
                         "bytes_per_token": held * cache.bytes_per_block / tokens,
                         "formula_bytes_per_token": formula,
                         "pool_blocks": cache.num_blocks,
                         "requests_fit": cache.num_blocks // most})
    return rows


def kv_formats_job(params: dict, emit: Emit, control: Control) -> dict | None:
    """FP8 against the float cache (capacity, step time, quality) and hybrid against full
    attention (bytes, capacity), at one KV budget."""
    budget = params["budget_mib"] * 2**20
    total = 4
    emit("progress", {"done": 0, "total": total, "message": "the float cache's decode steps"})
    engine = LLMEngine(EngineConfig(preset="tiny", device=params["device"],
                                    kv_budget_bytes=budget))
    formats = []
    for i, kv_dtype in enumerate(("auto", "fp8")):
        engine.set_kv_dtype(kv_dtype)
        row = format_row(engine, params, control)
        if row is None:
            return None
        formats.append(row)
        emit("progress", {"done": i + 1, "total": total,
                          "message": "fp8's decode steps" if i == 0 else "fp8's quality"})
    engine.set_kv_dtype("auto")
    quality = kv_quality(engine, params["windows"])
    if control.cancelled():
        return None
    emit("progress", {"done": 3, "total": total, "message": "hybrid against full attention"})
    hybrid = hybrid_rows(params, budget, control)
    if hybrid is None:
        return None
    emit("progress", {"done": total, "total": total, "message": "measured"})
    timed = [t for row in formats for t in row["step_ms_all"]]
    return {"device": engine.device, "preset": "tiny", "weights": engine.model_config.weights,
            "budget_mib": params["budget_mib"], "block_size": engine.cache.block_size,
            "batch_size": params["batch_size"], "prompt_len": params["prompt_len"],
            "new_tokens": params["new_tokens"], "formats": formats,
            "quality": quality.to_json(), "hybrid": hybrid,
            "spread": spread(timed, "decode step")}
