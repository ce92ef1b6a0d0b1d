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
  3. int8 weights (issue 15 item 2): TPOT at batch 1 on `small`, int8 against fp32, when the
     engine has the option (an EngineConfig field `weights` taking "int8", the planned
     `--weights fp32|int8`). Until then, what the option would stand on: the int8 kernel torch
     offers for weight-only int8 with per-channel scales (torch._weight_int8pack_mm, the one
     gpt-fast and torchao use) against fp32 F.linear, on every weight matrix of `small`'s decode
     step (12 layers and the output head, each read from memory as a step reads them), at 1, 4
     and 16 rows, with fp32 and bf16 activations, against the faster of two fp32 layouts
     (F.linear and (W @ x.T).T): ms per step and weight GB/s.

Each configuration runs --repeats times, interleaved, after one untimed pass; the least disturbed
run of each is compared (the lowest TTFT or TPOT: other work on a shared machine only ever slows
a run down; a ratio is best against best), and every run's figures are in the JSON. Prints every round, a table, and one JSON
object (also saved to bench/results/techniques.json).

    python bench/techniques.py [--repeats 5] [--batches 1,4,16] [--ks 1,2,3,4] [--skip-prefix] [--skip-spec] [--skip-int8]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from engine.config import EngineConfig, get_preset  # noqa: E402
from engine.device import describe_device  # noqa: E402
from engine.generate import generate  # noqa: E402
from engine.llm_engine import LLMEngine  # noqa: E402
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


def int8_available() -> bool:
    """Whether the engine offers int8 weights yet (issue 15 item 2)."""
    return any(f.name == "weights" for f in dataclasses.fields(EngineConfig))


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


def step_matrices(preset: str) -> list[tuple[int, int]]:
    """(out, in) of every weight matrix a decode step of the preset multiplies by."""
    cfg = get_preset(preset)
    q, kv = cfg.heads * cfg.head_dim, cfg.kv_heads * cfg.head_dim
    layer = [(q, cfg.hidden), (kv, cfg.hidden), (kv, cfg.hidden), (cfg.hidden, q),
             (cfg.intermediate, cfg.hidden), (cfg.intermediate, cfg.hidden),
             (cfg.hidden, cfg.intermediate)]
    return layer * cfg.layers + [(cfg.vocab, cfg.hidden)]


def quantize_rows(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-output-channel symmetric int8: (int8 weight, fp32 scale per row)."""
    scale = weight.abs().amax(dim=1).clamp(min=1e-8) / 127
    return torch.round(weight / scale[:, None]).clamp(-127, 127).to(torch.int8), scale


def bench_int8_kernels(repeats: int) -> dict:
    """Time one step's worth of products each way; the best of `repeats` per way and rows."""
    cfg = get_preset(INT8_PRESET)
    gen = torch.Generator().manual_seed(0)
    fp32, int8 = [], []
    for out_f, in_f in step_matrices(INT8_PRESET):
        w = torch.randn(out_f, in_f, generator=gen) / in_f ** 0.5
        fp32.append(w)
        int8.append(quantize_rows(w))
    weight_bytes = {"fp32": sum(w.numel() * 4 for w in fp32),
                    "int8": sum(q.numel() + 4 * s.numel() for q, s in int8)}
    bf16_scales = [(q, s.bfloat16()) for q, s in int8]

    def fp32_step(rows: dict[int, torch.Tensor]) -> None:
        for w in fp32:  # each matrix takes the rows of its input width
            torch.nn.functional.linear(rows[w.shape[1]], w)

    def fp32_w_xt_step(rows: dict[int, torch.Tensor]) -> None:
        for w in fp32:  # the layout BLAS often streams faster for few rows (matmul_plan)
            (w @ rows[w.shape[1]].t()).t()

    def int8_step(scaled: list[tuple[torch.Tensor, torch.Tensor]]):
        def run_step(rows: dict[int, torch.Tensor]) -> None:
            for q, scale in scaled:
                torch._weight_int8pack_mm(rows[q.shape[1]], q, scale)
        return run_step

    ways = {  # name: (one step's products, whose weight bytes, the rows' dtype)
        "fp32 F.linear": (fp32_step, "fp32", torch.float32),
        "fp32 (W @ x.T).T": (fp32_w_xt_step, "fp32", torch.float32),
        "int8 weight-only, fp32 rows": (int8_step(int8), "int8", torch.float32),
        "int8 weight-only, bf16 rows": (int8_step(bf16_scales), "int8", torch.bfloat16),
    }
    times: dict[str, dict[int, list[float]]] = {w: {r: [] for r in KERNEL_ROWS} for w in ways}
    for rep in range(repeats + 1):  # the first pass is untimed
        for count in KERNEL_ROWS:
            for name, (run_step, _, dtype) in ways.items():
                rows = {width: torch.randn(count, width, generator=gen).to(dtype)
                        for width in (cfg.hidden, cfg.heads * cfg.head_dim, cfg.intermediate)}
                began = time.perf_counter()
                run_step(rows)
                ms = 1000 * (time.perf_counter() - began)
                if rep:
                    times[name][count].append(ms)
                    print(f"  round {rep} {name:<28} {count:>2} rows {ms:8.2f} ms per step",
                          file=sys.stderr)
    fp32_best = {count: min(min(t[count]) for name, t in times.items() if name.startswith("fp32"))
                 for count in KERNEL_ROWS}  # the faster fp32 way at each row count
    kernels = []
    for name, (_, kind, _) in ways.items():
        for count in KERNEL_ROWS:
            ms = min(times[name][count])
            kernels.append({"way": name, "rows": count, "best_ms": ms,
                            "runs_ms": times[name][count],
                            "weight_gbs": weight_bytes[kind] / ms / 1e6,
                            "over_best_fp32": ms / fp32_best[count]})
    at_1 = {k["way"]: k["over_best_fp32"] for k in kernels if k["rows"] == 1}
    return {"engine": "no int8 weights option yet (issue 15 item 2): the kernels alone",
            "preset": INT8_PRESET, "kernel": "torch._weight_int8pack_mm (per-channel scales)",
            "matrices": len(fp32), "weight_bytes": weight_bytes, "kernels": kernels,
            "best_int8_over_fp32_at_1_row": min(v for w, v in at_1.items() if w.startswith("int8"))}


def bench_int8(repeats: int) -> dict:
    if not int8_available():
        return bench_int8_kernels(repeats)
    engines = {w: LLMEngine(EngineConfig(preset=INT8_PRESET, kv_budget_bytes=KV_BUDGET,
                                         **{"weights": w}))
               for w in ("fp32", "int8")}
    runs: dict[str, list[float]] = {w: [] for w in engines}
    for engine in engines.values():
        engine.warm_up()
    for rep in range(repeats):
        for w, engine in engines.items():
            [point] = sweep(engine, [1], INT8_PROMPT_LEN, INT8_NEW_TOKENS)
            runs[w].append(point.tpot_ms)
            print(f"  round {rep + 1} {INT8_PRESET} {w} batch 1 TPOT {point.tpot_ms:6.2f} ms",
                  file=sys.stderr)
    best = {w: min(v) for w, v in runs.items()}
    return {"preset": INT8_PRESET, "prompt_len": INT8_PROMPT_LEN, "new_tokens": INT8_NEW_TOKENS,
            "runs_tpot_ms": runs, "best_tpot_ms": best,
            "int8_over_fp32_tpot": best["int8"] / best["fp32"]}


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
    if "kernels" in int8:
        print(f"int8 weight-only kernel on {int8['preset']}'s decode-step matrices "
              f"({int8['matrices']}), {int8['engine']}")
        print(f"{'way':<30} {'rows':>4} {'ms/step':>8} {'GB/s':>6} {'x best fp32':>12}")
        for k in int8["kernels"]:
            print(f"{k['way']:<30} {k['rows']:>4} {k['best_ms']:>8.2f} {k['weight_gbs']:>6.1f} "
                  f"{k['over_best_fp32']:>12.2f}")
    else:
        print(f"int8 on {int8['preset']}, batch 1: TPOT {int8['best_tpot_ms']['int8']:.2f} ms vs "
              f"fp32 {int8['best_tpot_ms']['fp32']:.2f} ms = "
              f"{int8['int8_over_fp32_tpot']:.2f}x")


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

    load_before = os.getloadavg()
    started = time.time()
    device = describe_device("cpu" if not torch.cuda.is_available() else "cuda")
    print(f"device: {device}, threads {torch.get_num_threads()}, load average "
          f"{load_before[0]:.2f}", file=sys.stderr)
    prefix = None if args.skip_prefix else bench_prefix(args.repeats)
    spec = None if args.skip_spec else bench_speculative(args.repeats, batches, ks)
    int8 = None if args.skip_int8 else bench_int8(args.repeats)
    load_after = os.getloadavg()

    targets = []
    if prefix:
        targets.append({"target": "prefix cache TTFT speed-up, 1024-token shared prefix, tiny",
                        "value": round(prefix["ttft_speedup"], 3),
                        "limit": TARGET_PREFIX_SPEEDUP,
                        "met": prefix["ttft_speedup"] >= TARGET_PREFIX_SPEEDUP})
    if int8 is None:
        pass
    elif "kernels" in int8:
        ratio = int8["best_int8_over_fp32_at_1_row"]
        targets.append({"target": f"int8 / fp32 step products (kernels only), {INT8_PRESET}, "
                                  "1 row", "value": round(ratio, 3), "limit": TARGET_INT8_TPOT,
                        "met": ratio <= TARGET_INT8_TPOT})
    else:
        ratio = int8["int8_over_fp32_tpot"]
        targets.append({"target": f"int8 / fp32 TPOT, {INT8_PRESET}, batch 1",
                        "value": round(ratio, 3), "limit": TARGET_INT8_TPOT,
                        "met": ratio <= TARGET_INT8_TPOT})
    result = {"device": device, "threads": torch.get_num_threads(), "repeats": args.repeats,
              "load_average_before": load_before[0], "load_average_after": load_after[0],
              "wall_s": round(time.time() - started, 1), "prefix_cache": prefix,
              "speculative": spec, "int8": int8, "targets": targets}
    print()
    print_tables(prefix, spec, int8)
    print()
    for t in targets:
        print(f"[{'met' if t['met'] else 'MISSED'}] {t['target']}: {t['value']} "
              f"(limit {t['limit']})")
    print(f"load average {load_before[0]:.2f} before, {load_after[0]:.2f} after")
    out = Path(__file__).resolve().parent / "results"
    out.mkdir(exist_ok=True)
    (out / "techniques.json").write_text(json.dumps(result, indent=1))
    print(json.dumps(result))
    return 0 if all(t["met"] for t in targets) else 1


if __name__ == "__main__":
    sys.exit(main())
