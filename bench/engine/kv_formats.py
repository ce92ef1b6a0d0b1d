"""KV formats measured in one run: an fp8 KV cache against float32 on the trained tiny model, and
a hybrid-attention model's blocks against full attention.

  1. capacity: requests of 300 tokens the engine's block allocator admits into one 64 MiB budget,
     float32 and fp8. Target: fp8 holds at least 3.9x (4x less the scales).
  2. step cost: the decode step (engine.sweep.measure_point: TPOT, the median step) at each batch
     size of --batches, 256-token prompts, float32 and fp8 on the same engine (set_kv_dtype), both
     on the torch attention path (the one fp8 takes), interleaved --repeats times; the best of
     each is compared (other work on a shared machine only slows a run down).
  3. quality: held-out loss with each format and teacher-forced next-token agreement
     (engine.kv_quality, lesson 11's windows). Target: agreement at least 0.95.
  4. hybrid: tiny-hybrid (every other layer windowed to 256 tokens) against tiny's shape with
     full attention: the blocks and bytes the allocator really holds for one decoding request at
     each context length, beside engine.calc.kv_formats' formula.

Prints every round, a table, and the harness's JSON result (bench/harness.py).

    python bench/engine/kv_formats.py [--repeats 3] [--batches 1,8]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.harness import Run  # noqa: E402
from engine.block_manager import BlockManager  # noqa: E402
from engine.calc.kv_formats import hybrid_blocks  # noqa: E402
from engine.config import EngineConfig, get_preset  # noqa: E402
from engine.device import describe_device  # noqa: E402
from engine.kv_quality import kv_quality  # noqa: E402
from engine.llm_engine import LLMEngine  # noqa: E402
from engine.model.kv_cache import PagedKVCache  # noqa: E402
from engine.sequence import Sequence  # noqa: E402
from engine.sweep import measure_point  # noqa: E402

BUDGET = 64 * 2**20
FIT_TOKENS, PROMPT_LEN, NEW_TOKENS = 300, 256, 16
CONTEXTS = (128, 256, 512, 1024, 2048)
TARGET_CAPACITY, TARGET_AGREEMENT = 3.9, 0.95
FORMATS = ("auto", "fp8")


def requests_that_fit(engine: LLMEngine, tokens: int) -> int:
    """Requests of `tokens` tokens the engine's own allocator admits, then all given back."""
    held = []
    while engine.blocks.can_grow(seq := engine.new_sequence([1] * tokens, 1), tokens):
        engine.blocks.grow(seq, tokens)
        held.append(seq)
    for seq in held:
        engine.release(seq)
    return len(held)


def bench_fp8(run: Run, repeats: int, batches: list[int]) -> dict:
    engine = LLMEngine(EngineConfig(preset="tiny", device="cpu", kv_budget_bytes=BUDGET,
                                    backend="torch"))
    fits = {}
    for fmt in FORMATS:
        engine.set_kv_dtype(fmt)
        fits[fmt] = requests_that_fit(engine, FIT_TOKENS)
        run.round({"part": "capacity", "kv_dtype": fmt, "blocks": engine.cache.num_blocks,
                   "allocated_bytes": engine.cache.allocated_bytes,
                   f"requests_of_{FIT_TOKENS}": fits[fmt]})
    tpot: dict[str, dict[int, list[float]]] = {f: {b: [] for b in batches} for f in FORMATS}
    for fmt in FORMATS:  # one untimed pass each
        engine.set_kv_dtype(fmt)
        measure_point(engine, batches[0], PROMPT_LEN, 4)
    for r in range(repeats):
        for b in batches:
            for fmt in FORMATS:
                engine.set_kv_dtype(fmt)
                point = measure_point(engine, b, PROMPT_LEN, NEW_TOKENS, seed=r)
                tpot[fmt][b].append(point.tpot_ms)
                run.round({"part": "step", "round": r + 1, "batch": b, "kv_dtype": fmt,
                           "tpot_ms": round(point.tpot_ms, 3)})
    engine.set_kv_dtype("auto")
    best = {f: {b: min(v) for b, v in per.items()} for f, per in tpot.items()}
    quality = kv_quality(engine)
    run.round({"part": "quality", **quality.to_json()})
    return {"budget_bytes": BUDGET, "fit_tokens": FIT_TOKENS, "requests_that_fit": fits,
            "capacity_ratio": fits["fp8"] / fits["auto"], "prompt_len": PROMPT_LEN,
            "tpot_ms": tpot, "best_tpot_ms": best,
            "fp8_over_float32_tpot": {b: best["fp8"][b] / best["auto"][b] for b in batches},
            "quality": quality.to_json()}


def held_blocks(cfg, tokens: int) -> tuple[int, int, int]:
    """(full blocks, window blocks, bytes) one request of `tokens` tokens holds in the engine's
    allocator after a 64-token-chunked prefill and one decode step."""
    cache = PagedKVCache(cfg, BUDGET, 16, torch.float32, "cpu")
    manager = BlockManager(cache.num_blocks, 16, window=cfg.sliding_window)
    seq = Sequence(0, [1] * tokens, 1)
    while seq.num_computed < tokens - 1:
        count = min(64, tokens - 1 - seq.num_computed)
        manager.grow(seq, count)
        seq.num_computed += count
    manager.grow(seq, 1)
    return (len(seq.block_table), manager.window_blocks(seq),
            manager.num_used * cache.bytes_per_block)


def bench_hybrid(run: Run) -> dict:
    hybrid, full = get_preset("tiny-hybrid"), get_preset("tiny")
    rows = []
    for tokens in CONTEXTS:
        f_blocks, _, f_bytes = held_blocks(full, tokens)
        h_full, h_window, h_bytes = held_blocks(hybrid, tokens)
        formula = hybrid_blocks(tokens, 16, hybrid.sliding_window)
        rows.append(run.round({
            "part": "hybrid", "tokens": tokens, "full_model_blocks": f_blocks,
            "full_model_bytes": f_bytes, "hybrid_full_blocks": h_full,
            "hybrid_window_blocks": h_window, "hybrid_bytes": h_bytes,
            "formula_full_blocks": formula[0], "formula_window_blocks_at_most": formula[1],
            "hybrid_over_full_bytes": round(h_bytes / f_bytes, 4)}))
    return {"window": hybrid.sliding_window, "rows": rows}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--batches", default="1,8")
    args = parser.parse_args()
    batches = [int(b) for b in args.batches.split(",")]
    run = Run("kv_formats", args)
    device = describe_device("cpu")
    print(f"device: {device}, threads {torch.get_num_threads()}", flush=True)
    hybrid = bench_hybrid(run)
    fp8 = bench_fp8(run, args.repeats, batches)
    run.target("fp8 / float32 requests that fit, tiny, 64 MiB", fp8["capacity_ratio"],
               at_least=TARGET_CAPACITY)
    run.target("fp8 next-token agreement with float32, tiny held-out",
               fp8["quality"]["agreement"], at_least=TARGET_AGREEMENT)
    print()
    print(f"{'batch':>5} {'float32 ms':>10} {'fp8 ms':>8} {'fp8/f32':>8}")
    for b in batches:
        print(f"{b:>5} {fp8['best_tpot_ms']['auto'][b]:>10.2f} {fp8['best_tpot_ms']['fp8'][b]:>8.2f}"
              f" {fp8['fp8_over_float32_tpot'][b]:>8.2f}")
    q = fp8["quality"]
    print(f"loss float32 {q['loss_float']:.4f}, fp8 {q['loss_fp8']:.4f}; agreement "
          f"{q['agreement']:.4f} over {q['positions']} positions")
    print(f"{'tokens':>6} {'full bytes':>11} {'hybrid bytes':>13} {'ratio':>6}")
    for r in hybrid["rows"]:
        print(f"{r['tokens']:>6} {r['full_model_bytes']:>11,} {r['hybrid_bytes']:>13,} "
              f"{r['hybrid_over_full_bytes']:>6.3f}")
    return run.finish({"device": device, "threads": torch.get_num_threads(),
                       "fp8": fp8, "hybrid": hybrid})


if __name__ == "__main__":
    sys.exit(main())
