"""The tuning techniques of lessons 9-11, measured in one run (so the ratios share the machine's
mood), each against the same engine without it:

  1. prefix caching: requests that share a 1024-token system prompt (then 32 to 64 tokens of
     their own, 4 output tokens), served one at a time (a closed loop of one user, so TTFT is
     the prefill alone) by the tiny engine with the prefix cache off and on. Figure: the mean
     TTFT of the requests after the first (the first finds nothing cached; the cache is
     cleared before every round). Target: at least 3x faster with the cache.
  2. speculative decoding: greedy generation of 64 tokens from corpus prompts, for each batch
     size and k, with prompt lookup (ngram) and the trained draft model, against plain
     decoding at the same batch size. Figures: acceptance rate, tokens per target step
     (measured, and the formula (1 - a^(k+1)) / (1 - a) at the measured a), TPOT (mean over
     the batch's sequences) and its ratio to plain decoding's. The outputs must equal plain
     decoding's (checked, every run).
  3. int8 weights: the engine on `small` (random weights) with fp32 and with int8 weights
     (--weights int8: per-row scales, the engine's C++ kernel; the Triton kernel --weights int8
     uses on CUDA is not timed: this bench runs on the CPU), TPOT at each batch size of
     --batches. Target: int8 at most 0.7x fp32's TPOT at batch 1. Then one decode step's
     products alone (every weight matrix of small's step), at 1, 4 and 16 rows: the faster of
     two fp32 layouts (F.linear and (W @ x.T).T), the engine's int8 kernel, and the int8 kernel
     torch offers (torch._weight_int8pack_mm, the one gpt-fast and torchao use; up to 4 rows):
     ms per step and weight GB/s.

Each configuration runs --repeats times, interleaved, after one untimed pass; the least disturbed
run of each is compared (the lowest TTFT or TPOT: other work on a shared machine only ever slows
a run down; a ratio is best against best), and every run's figures are in the JSON. Prints every
round, a table, and the harness's JSON result (bench/harness.py: targets met or MISSED, the load
average, the log line).

    python bench/engine/techniques.py [--repeats 5] [--batches 1,4,16] [--ks 1,2,3,4] [--skip-prefix] [--skip-spec] [--skip-int8]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.harness import Run  # noqa: E402
from engine.config import WEIGHT_FORMATS, EngineConfig, get_preset  # noqa: E402
from engine.device import describe_device  # noqa: E402
from engine.generate import generate  # noqa: E402
from engine.llm_engine import LLMEngine  # noqa: E402
from engine.model import int8  # noqa: E402
from engine.model.cpu_kernel import KernelBuildError, build_kernel, int8_linear_kernel  # noqa: E402
from engine.scheduler import SchedulerConfig  # noqa: E402
from engine.serve.loop import run  # noqa: E402
from engine.serve.workload import PromptSource, WorkloadSpec, make_workload  # noqa: E402
from engine.speculative import SpeculativeDecoder, make_draft  # noqa: E402
from engine.sweep import sweep  # noqa: E402

KV_BUDGET = 256 * 2**20
SHARED_PREFIX = WorkloadSpec(kind="fixed", requests=6, concurrency=1, prompt_len=(32, 64),
                             output_len=(4, 4), shared_prefix_len=1024, seed=0)
PREFIX_POLICY = SchedulerConfig("continuous", max_batch=1, chunk_size=0)
TARGET_PREFIX_SPEEDUP = 3.0
SPEC_PROMPT_LEN, SPEC_NEW_TOKENS = 48, 64
INT8_PRESET, INT8_PROMPT_LEN, INT8_NEW_TOKENS, TARGET_INT8_TPOT = "small", 128, 32, 0.7


# ---- 1. prefix caching -------------------------------------------------------------------------
def prefix_round(engine: LLMEngine, requests) -> dict:
    engine.blocks.clear_cache()  # every round starts cold: the first request computes the prefix
    result = run(engine, requests, PREFIX_POLICY)
    ttft = [1000 * (r.first_token_s - r.arrival_s) for r in result.requests]
    out = {"ttft_first_ms": ttft[0], "ttft_rest_ms": statistics.mean(ttft[1:]),
           "ttft_ms": ttft, "outputs": [r.output_ids for r in result.requests]}
    if "prefix_cache" in result.extra:
        stats = result.extra["prefix_cache"]
        out["cache"] = {k: stats[k] for k in ("hits", "lookups", "tokens_skipped",
                                              "blocks_shared", "evictions", "token_hit_rate")}
    return out


def bench_prefix(repeats: int) -> dict:
    engines = {name: LLMEngine(EngineConfig(preset="tiny", kv_budget_bytes=KV_BUDGET,
                                            prefix_caching=name == "on"))
               for name in ("off", "on")}
    requests = make_workload(SHARED_PREFIX, engines["off"].tokenizer)
    for engine in engines.values():
        engine.warm_up()
        prefix_round(engine, requests[:2])  # untimed
    runs: dict[str, list[dict]] = {name: [] for name in engines}
    for rep in range(repeats):
        for name, engine in engines.items():
            runs[name].append(prefix_round(engine, requests))
            r = runs[name][-1]
            print(f"  round {rep + 1} prefix cache {name:<3} TTFT first {r['ttft_first_ms']:7.1f} "
                  f"ms, later requests {r['ttft_rest_ms']:7.1f} ms", file=sys.stderr)
        if runs["on"][-1]["outputs"] != runs["off"][-1]["outputs"]:
            raise AssertionError("prefix caching changed the generated tokens")
    best = {name: min(rs, key=lambda r: r["ttft_rest_ms"]) for name, rs in runs.items()}
    speedup = best["off"]["ttft_rest_ms"] / best["on"]["ttft_rest_ms"]
    for rs in runs.values():
        for r in rs:
            del r["outputs"]
    return {
        "workload": SHARED_PREFIX.to_json(), "policy": PREFIX_POLICY.to_json(), "best": best,
        "runs": runs, "ttft_speedup": speedup,
        "round_speedups": [off["ttft_rest_ms"] / on["ttft_rest_ms"]
                           for off, on in zip(runs["off"], runs["on"], strict=True)],
    }


# ---- 2. speculative decoding -------------------------------------------------------------------
def spec_prompts(engine: LLMEngine, count: int) -> list[list[int]]:
    rng = np.random.default_rng(0)
    source = PromptSource(engine.tokenizer)
    return [source.prompt(SPEC_PROMPT_LEN, rng) for _ in range(count)]


def spec_run(engine: LLMEngine, prompts, decoder: SpeculativeDecoder | None) -> dict:
    gens = generate(engine, prompts, SPEC_NEW_TOKENS, ignore_eos=True, speculative=decoder)
    out = {"tpot_ms": statistics.mean(g.tpot_ms for g in gens),
           "outputs": [g.seq.output_ids for g in gens]}
    if decoder is not None:
        s = decoder.stats.to_json()
        out.update({key: s[key] for key in (
            "acceptance_rate", "alpha", "tokens_per_step", "expected_tokens_per_step",
            "expected_tokens_per_step_at_k", "steps", "proposed", "accepted", "draft_s",
            "verify_s")})
    return out


def bench_speculative(repeats: int, batches: list[int], ks: list[int]) -> dict:
    engine = LLMEngine(EngineConfig(preset="tiny", kv_budget_bytes=KV_BUDGET))
    engine.warm_up()
    drafts = {method: make_draft(method, engine) for method in ("ngram", "draft")}
    prompts = spec_prompts(engine, max(batches))
    configs = [("plain", 0)] + [(m, k) for m in drafts for k in ks]

    def once(batch: int, method: str, k: int) -> dict:
        decoder = None if method == "plain" else SpeculativeDecoder(engine, drafts[method], k)
        return spec_run(engine, prompts[:batch], decoder)

    for batch in batches:  # untimed pass
        for method, k in configs:
            once(batch, method, k)
    runs: dict[str, list[dict]] = {}
    for rep in range(repeats):
        for batch in batches:
            plain = None
            for method, k in configs:
                r = once(batch, method, k)
                name = f"b{batch} {method}" + (f" k{k}" if k else "")
                outputs = r.pop("outputs")
                if method == "plain":
                    plain, plain_outputs = r, outputs
                elif outputs != plain_outputs:
                    raise AssertionError(f"{name}: speculative output differs from plain")
                r["tpot_over_plain"] = r["tpot_ms"] / plain["tpot_ms"]
                runs.setdefault(name, []).append({"batch": batch, "method": method, "k": k, **r})
                extra = "" if method == "plain" else (
                    f", accepted {100 * r['acceptance_rate']:3.0f}%, "
                    f"{r['tokens_per_step']:.2f} tokens/step (formula "
                    f"{r['expected_tokens_per_step']:.2f})")
                print(f"  round {rep + 1} {name:<14} TPOT {r['tpot_ms']:6.2f} ms "
                      f"({r['tpot_over_plain']:.2f}x plain){extra}", file=sys.stderr)
    best = {name: dict(min(rs, key=lambda r: r["tpot_ms"])) for name, rs in runs.items()}
    for b in best.values():  # the least disturbed run against the least disturbed plain run
        b["tpot_over_plain"] = b["tpot_ms"] / best[f"b{b['batch']} plain"]["tpot_ms"]
    return {"prompt_len": SPEC_PROMPT_LEN, "new_tokens": SPEC_NEW_TOKENS, "batches": batches,
            "ks": ks, "best": best, "runs": runs}


# ---- 3. int8 weights ---------------------------------------------------------------------------
KERNEL_ROWS = (1, 4, 16)
TORCH_INT8_MAX_ROWS = 4  # torch's int8 kernel takes seconds per pass beyond this: not worth a run


def step_matrices(preset: str) -> list[tuple[int, int]]:
    """(out, in) of every weight matrix a decode step of the preset multiplies by."""
    cfg = get_preset(preset)
    q, kv = cfg.heads * cfg.head_dim, cfg.kv_heads * cfg.head_dim
    layer = [(q + 2 * kv, cfg.hidden), (cfg.hidden, q), (2 * cfg.intermediate, cfg.hidden),
             (cfg.hidden, cfg.intermediate)]
    return layer * cfg.layers + [(cfg.vocab, cfg.hidden)]


def bench_int8_kernels(repeats: int) -> dict:
    """One decode step's products of `small` (its 49 matrices, random weights), each way: the
    faster of two fp32 layouts, the engine's C++ int8 kernel, and torch's weight-only int8 kernel
    (torch._weight_int8pack_mm, per-channel scales, the one gpt-fast and torchao use)."""
    cfg = get_preset(INT8_PRESET)
    kernel = int8_linear_kernel()
    gen = torch.Generator().manual_seed(0)
    fp32 = [torch.randn(o, i, generator=gen) / i ** 0.5 for o, i in step_matrices(INT8_PRESET)]
    quantized = [int8.quantize_rows(w) for w in fp32]
    weight_bytes = {"fp32": sum(w.numel() * 4 for w in fp32),
                    "int8": sum(int8.int8_bytes(q, s) for q, s in quantized)}
    ways = {  # name: (one step's products, whose weight bytes, most rows worth timing)
        "fp32 F.linear": (lambda rows: [F.linear(rows[w.shape[1]], w) for w in fp32], "fp32", 99),
        "fp32 (W @ x.T).T": (lambda rows: [(w @ rows[w.shape[1]].t()).t() for w in fp32],
                             "fp32", 99),
        "int8 engine C++ kernel": (lambda rows: [kernel(rows[q.shape[1]], q, s)
                                                 for q, s in quantized], "int8", 99),
        "int8 torch._weight_int8pack_mm": (
            lambda rows: [torch._weight_int8pack_mm(rows[q.shape[1]], q, s)
                          for q, s in quantized], "int8", TORCH_INT8_MAX_ROWS),
    }
    times: dict[str, dict[int, list[float]]] = {w: {r: [] for r in KERNEL_ROWS} for w in ways}
    for rep in range(repeats + 1):  # the first pass is untimed
        for count in KERNEL_ROWS:
            rows = {width: torch.randn(count, width, generator=gen)
                    for width in (cfg.hidden, cfg.heads * cfg.head_dim, cfg.intermediate)}
            for name, (run_step, _, most) in ways.items():
                if count > most:
                    continue
                began = time.perf_counter()
                run_step(rows)
                ms = 1000 * (time.perf_counter() - began)
                if rep:
                    times[name][count].append(ms)
                    print(f"  round {rep} {name:<31} {count:>2} rows {ms:8.2f} ms per step",
                          file=sys.stderr)
    fp32_best = {count: min(min(t[count]) for name, t in times.items() if name.startswith("fp32"))
                 for count in KERNEL_ROWS}  # the faster fp32 way at each row count
    kernels = [{"way": name, "rows": count, "best_ms": min(times[name][count]),
                "runs_ms": times[name][count],
                "weight_gbs": weight_bytes[kind] / min(times[name][count]) / 1e6,
                "over_best_fp32": min(times[name][count]) / fp32_best[count]}
               for name, (_, kind, _) in ways.items() for count in KERNEL_ROWS
               if times[name][count]]
    return {"matrices": len(fp32), "weight_bytes": weight_bytes, "kernels": kernels}


def bench_int8(repeats: int, batches: list[int]) -> dict:
    """The engine on `small` with fp32 and int8 weights: TPOT at each batch size (sweep: a
    128-token prompt per sequence, then 32 tokens), best of `repeats`, interleaved; then the
    step's products alone, each way (bench_int8_kernels)."""
    try:
        build_kernel(lambda s: print(f"  compiling the C++ kernels, {s:.0f} s", file=sys.stderr))
    except KernelBuildError as e:
        return {"error": str(e)}
    engines = {w: LLMEngine(EngineConfig(preset=INT8_PRESET, device="cpu",
                                         kv_budget_bytes=KV_BUDGET, weight_format=w))
               for w in WEIGHT_FORMATS}
    runs = {w: {b: [] for b in batches} for w in engines}
    for engine in engines.values():
        engine.warm_up()
    for rep in range(repeats):
        for b in batches:
            for w, engine in engines.items():
                [point] = sweep(engine, [b], INT8_PROMPT_LEN, INT8_NEW_TOKENS)
                runs[w][b].append(point.tpot_ms)
                print(f"  round {rep + 1} {INT8_PRESET} {w} batch {b:>2} TPOT "
                      f"{point.tpot_ms:7.2f} ms", file=sys.stderr)
    best = {w: {b: min(v) for b, v in r.items()} for w, r in runs.items()}
    weight_bytes = {w: e.model.weight_bytes() for w, e in engines.items()}
    del engines
    return {"preset": INT8_PRESET, "prompt_len": INT8_PROMPT_LEN, "new_tokens": INT8_NEW_TOKENS,
            "weight_bytes": weight_bytes, "runs_tpot_ms": runs, "best_tpot_ms": best,
            "int8_over_fp32_tpot": {b: best["int8"][b] / best["fp32"][b] for b in batches},
            "products": bench_int8_kernels(repeats)}


# ---- report ------------------------------------------------------------------------------------
def print_tables(prefix: dict | None, spec: dict | None, int8: dict | None) -> None:
    if prefix:
        print(f"prefix caching: {SHARED_PREFIX.shared_prefix_len}-token shared prefix, "
              f"best of {len(prefix['runs']['on'])} rounds")
        print(f"{'cache':<6} {'TTFT first ms':>14} {'TTFT later ms':>14}")
        for name, b in prefix["best"].items():
            print(f"{name:<6} {b['ttft_first_ms']:>14.1f} {b['ttft_rest_ms']:>14.1f}")
        print(f"speed-up {prefix['ttft_speedup']:.2f}x (rounds: " +
              ", ".join(f"{r:.2f}" for r in prefix["round_speedups"]) + ")")
        print()
    if spec:
        print(f"speculative decoding: {spec['new_tokens']} tokens from {spec['prompt_len']}-token "
              f"prompts, best TPOT of each")
        print(f"{'config':<15} {'TPOT ms':>8} {'x plain':>8} {'accept':>7} {'alpha':>6} "
              f"{'tok/step':>9} {'formula':>8}")
        for name, b in spec["best"].items():
            if b["method"] == "plain":
                print(f"{name:<15} {b['tpot_ms']:>8.2f} {1:>8.2f}")
                continue
            print(f"{name:<15} {b['tpot_ms']:>8.2f} {b['tpot_over_plain']:>8.2f} "
                  f"{100 * b['acceptance_rate']:>6.0f}% {b['alpha']:>6.2f} "
                  f"{b['tokens_per_step']:>9.2f} {b['expected_tokens_per_step']:>8.2f}")
        print()
    if int8 is None:
        return
    if "error" in int8:
        print(f"int8: not measured ({int8['error']})")
        return
    print(f"int8 weights on {int8['preset']}: TPOT, {int8['prompt_len']}-token prompts, "
          f"{int8['new_tokens']} new tokens; weights read per step "
          f"{int8['weight_bytes']['fp32'] / 1e6:.0f} MB fp32, "
          f"{int8['weight_bytes']['int8'] / 1e6:.0f} MB int8")
    print(f"{'batch':>5} {'fp32 ms':>8} {'int8 ms':>8} {'int8/fp32':>10}")
    for b, ratio in int8["int8_over_fp32_tpot"].items():
        print(f"{b:>5} {int8['best_tpot_ms']['fp32'][b]:>8.2f} "
              f"{int8['best_tpot_ms']['int8'][b]:>8.2f} {ratio:>10.2f}")
    products = int8["products"]
    print(f"one decode step's {products['matrices']} products alone, best of each")
    print(f"{'way':<31} {'rows':>4} {'ms/step':>8} {'GB/s':>6} {'x best fp32':>12}")
    for k in products["kernels"]:
        print(f"{k['way']:<31} {k['rows']:>4} {k['best_ms']:>8.2f} {k['weight_gbs']:>6.1f} "
              f"{k['over_best_fp32']:>12.2f}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--batches", default="1,4,16")
    parser.add_argument("--ks", default="1,2,3,4")
    parser.add_argument("--skip-prefix", action="store_true")
    parser.add_argument("--skip-spec", action="store_true")
    parser.add_argument("--skip-int8", action="store_true")
    args = parser.parse_args()
    batches = [int(b) for b in args.batches.split(",")]
    ks = [int(k) for k in args.ks.split(",")]

    bench = Run("techniques", args)
    device = describe_device("cpu" if not torch.cuda.is_available() else "cuda")
    print(f"device: {device}, threads {torch.get_num_threads()}", flush=True)
    prefix = None if args.skip_prefix else bench_prefix(args.repeats)
    spec = None if args.skip_spec else bench_speculative(args.repeats, batches, ks)
    int8 = None if args.skip_int8 else bench_int8(args.repeats, batches)

    if prefix:
        bench.target("prefix cache TTFT speed-up, 1024-token shared prefix, tiny",
                     prefix["ttft_speedup"], at_least=TARGET_PREFIX_SPEEDUP)
    if int8 and "error" not in int8 and 1 in int8["int8_over_fp32_tpot"]:
        bench.target(f"int8 / fp32 TPOT, {INT8_PRESET}, batch 1",
                     int8["int8_over_fp32_tpot"][1], at_most=TARGET_INT8_TPOT)
    result = {"device": device, "threads": torch.get_num_threads(), "repeats": args.repeats,
              "prefix_cache": prefix, "speculative": spec, "int8": int8}
    print()
    print_tables(prefix, spec, int8)
    print()
    return bench.finish(result)


if __name__ == "__main__":
    sys.exit(main())
