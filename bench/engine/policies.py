"""Batching policies against each other on one workload, and chunked prefill against the stall.

In one run (so the ratios share the machine's mood), on the `tiny` preset with the serving loop:
  1. saturation: 48 requests all arriving at t = 0 (--rate inf), prompts of 32 to 256 tokens,
     forced outputs of 8 to 128 tokens, max batch 8, under static, dynamic and continuous
     batching. Target: continuous throughput (output tokens / s) at least 1.3x static.
  2. interference: 8 requests (64-token prompts) decoding 160 tokens each, and one 1536-token
     prompt arriving at 0.2 s, served by continuous batching (max batch 16, so the long prompt
     is admitted at once) with whole-prompt prefill versus 128-token chunks. Figure: the worst
     gap between two tokens of the 8 running requests. Target: at least 2.5x smaller chunked.
Each configuration runs --repeats times, interleaved, after one untimed warm-up pass, and the
least disturbed run of each is compared: the one with the highest throughput, or the smallest
worst gap. On a shared machine other work only ever slows a run down, so the best of N runs is
the closest to what the machine can do (timeit's minimum, for the same reason); the per-round
ratios of adjacent runs and every run's figures are in the JSON too. Prints a table and the
harness's JSON result (bench/harness.py: targets met or MISSED, the load average, the log line).

    python bench/engine/policies.py [--repeats 3] [--preset tiny]
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.harness import Run  # noqa: E402
from engine.config import EngineConfig  # noqa: E402
from engine.device import describe_device  # noqa: E402
from engine.llm_engine import LLMEngine  # noqa: E402
from engine.scheduler import SchedulerConfig  # noqa: E402
from engine.serve.loop import RunResult, run  # noqa: E402
from engine.serve.workload import WorkloadSpec, make_workload  # noqa: E402

KV_BUDGET = 256 * 2**20
SATURATION = WorkloadSpec(kind="poisson", requests=48, rate=math.inf, prompt_len=(32, 256),
                          output_len=(8, 128), seed=0)
POLICIES = {
    "static": SchedulerConfig("static", max_batch=8),
    "dynamic": SchedulerConfig("dynamic", max_batch=8, timeout_ms=50),
    "continuous": SchedulerConfig("continuous", max_batch=8),
}
INTERFERENCE = WorkloadSpec(kind="interference", requests=8, prompt_len=(64, 64),
                            output_len=(160, 160), long_prompt_len=1536, long_at_s=0.2, seed=0)
CHUNKING = {
    "unchunked": SchedulerConfig("continuous", max_batch=16, chunk_size=0),
    "chunk 128": SchedulerConfig("continuous", max_batch=16, chunk_size=128),
}
TARGET_THROUGHPUT, TARGET_ITL = 1.3, 2.5


def saturation_figures(result: RunResult) -> dict:
    m = result.metrics
    return {
        "throughput_tok_s": m.throughput_tok_s,
        "requests_per_s": m.requests_per_s,
        "duration_s": m.duration_s,
        "ttft_p50_ms": m.ttft_ms.p50,
        "ttft_p95_ms": m.ttft_ms.p95,
        "itl_p50_ms": m.itl_ms.p50,
        "slot_use": m.slot_use,
        "steps": len(result.steps),
    }


def interference_figures(result: RunResult, long_id: int) -> dict:
    """Gaps between tokens of the requests already running when the long prompt arrived."""
    running = [r for r in result.requests if r.id != long_id]
    gaps = [1000 * (b - a) for r in running for a, b in zip(r.token_s, r.token_s[1:])]
    long = next(r for r in result.requests if r.id == long_id)
    return {
        "worst_itl_ms": max(gaps),
        "itl_p50_ms": statistics.median(gaps),
        "long_prompt_ttft_ms": 1000 * (long.first_token_s - long.arrival_s),
        "long_prompt_steps": sum(1 for s in result.steps
                                 if any(i == long_id for i, _ in s.prefill_chunks)),
    }


def best_of(runs: list[dict], key: str, highest: bool) -> dict:
    """The least disturbed run: highest or lowest value of key."""
    return (max if highest else min)(runs, key=lambda r: r[key])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--preset", default="tiny")
    args = parser.parse_args()

    bench = Run("policies", args)
    engine = LLMEngine(EngineConfig(preset=args.preset, kv_budget_bytes=KV_BUDGET))
    engine.warm_up()
    device = describe_device(engine.device)
    print(f"device: {device}, threads {torch.get_num_threads()}, preset {args.preset} "
          f"({engine.model_config.weights} weights)", flush=True)
    saturation = make_workload(SATURATION, engine.tokenizer)
    interference = make_workload(INTERFERENCE, engine.tokenizer)
    long_id = interference[-1].id

    # One untimed pass of each configuration: first-call costs never land in a figure.
    for config in POLICIES.values():
        run(engine, saturation[:12], config)
    for config in CHUNKING.values():
        run(engine, interference, config)

    started = time.time()
    sat_runs: dict[str, list[dict]] = {name: [] for name in POLICIES}
    int_runs: dict[str, list[dict]] = {name: [] for name in CHUNKING}
    for rep in range(args.repeats):
        for name, config in POLICIES.items():
            sat_runs[name].append(saturation_figures(run(engine, saturation, config)))
            bench.round({"round": rep + 1, "policy": name, **sat_runs[name][-1]},
                        f"  round {rep + 1} {name:<10} "
                        f"{sat_runs[name][-1]['throughput_tok_s']:7.1f} tok/s")
        for name, config in CHUNKING.items():
            int_runs[name].append(interference_figures(run(engine, interference, config), long_id))
            bench.round({"round": rep + 1, "prefill": name, **int_runs[name][-1]},
                        f"  round {rep + 1} {name:<10} worst ITL "
                        f"{int_runs[name][-1]['worst_itl_ms']:7.1f} ms")
    sat = {name: best_of(runs, "throughput_tok_s", True) for name, runs in sat_runs.items()}
    inter = {name: best_of(runs, "worst_itl_ms", False) for name, runs in int_runs.items()}
    round_ratios = {
        "continuous_over_static_throughput": [
            c["throughput_tok_s"] / s["throughput_tok_s"]
            for c, s in zip(sat_runs["continuous"], sat_runs["static"], strict=True)],
        "unchunked_over_chunked_worst_itl": [
            u["worst_itl_ms"] / c["worst_itl_ms"]
            for u, c in zip(int_runs["unchunked"], int_runs["chunk 128"], strict=True)],
    }

    throughput_ratio = sat["continuous"]["throughput_tok_s"] / sat["static"]["throughput_tok_s"]
    dynamic_ratio = sat["continuous"]["throughput_tok_s"] / sat["dynamic"]["throughput_tok_s"]
    itl_ratio = inter["unchunked"]["worst_itl_ms"] / inter["chunk 128"]["worst_itl_ms"]
    # The schedule's own saving, free of the machine: steps static needs per continuous step.
    step_ratio = sat["static"]["steps"] / sat["continuous"]["steps"]
    bench.target("continuous / static throughput, 48 requests, rate inf, max batch 8",
                 throughput_ratio, at_least=TARGET_THROUGHPUT)
    bench.target("worst ITL of running requests, unchunked / 128-token chunks", itl_ratio,
                 at_least=TARGET_ITL)
    result = {
        "device": engine.device, "device_name": device, "preset": args.preset,
        "weights": engine.model_config.weights, "threads": torch.get_num_threads(),
        "repeats": args.repeats, "timed_s": round(time.time() - started, 1),
        "saturation": {"workload": SATURATION.to_json(), "best": sat, "runs": sat_runs},
        "interference": {"workload": INTERFERENCE.to_json(), "best": inter, "runs": int_runs},
        "ratios": {"continuous_over_static_throughput": throughput_ratio,
                   "continuous_over_dynamic_throughput": dynamic_ratio,
                   "unchunked_over_chunked_worst_itl": itl_ratio,
                   "static_over_continuous_steps": step_ratio},
        "round_ratios": round_ratios,
    }

    print()
    print(f"best of {args.repeats} runs each")
    print(f"{'policy':<11} {'tok/s':>8} {'req/s':>6} {'TTFT p50':>9} {'TTFT p95':>9} "
          f"{'ITL p50':>8} {'slots':>6} {'steps':>6}")
    for name, f in sat.items():
        print(f"{name:<11} {f['throughput_tok_s']:>8.1f} {f['requests_per_s']:>6.2f} "
              f"{f['ttft_p50_ms']:>9.0f} {f['ttft_p95_ms']:>9.0f} {f['itl_p50_ms']:>8.2f} "
              f"{100 * f['slot_use']:>5.0f}% {f['steps']:>6.0f}")
    print()
    print(f"{'prefill':<11} {'worst ITL ms':>13} {'ITL p50 ms':>11} {'long TTFT ms':>13} "
          f"{'long steps':>11}")
    for name, f in inter.items():
        print(f"{name:<11} {f['worst_itl_ms']:>13.1f} {f['itl_p50_ms']:>11.2f} "
              f"{f['long_prompt_ttft_ms']:>13.1f} {f['long_prompt_steps']:>11.0f}")
    print()
    print(f"static needs {step_ratio:.2f}x the steps of continuous; continuous / dynamic "
          f"throughput {dynamic_ratio:.2f}x")
    rounds = round_ratios["continuous_over_static_throughput"]
    print("continuous / static in each round: " + ", ".join(f"{r:.2f}" for r in rounds) +
          f" (median {statistics.median(rounds):.2f})")
    print()
    return bench.finish(result)


if __name__ == "__main__":
    sys.exit(main())
