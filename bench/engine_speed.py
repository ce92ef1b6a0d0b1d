"""Engine speed against the machine's limits, a plain reference loop, and Hugging Face generate().

In one run (so the ratios share the machine's mood):
  1. memory read bandwidth and matmul peak (micro-benchmarks, measured now, not cached; the
     bandwidth again before each round at batch 1, whose step is compared with that round's
     floor);
  2. the decode step of `small` at batch 1, 4, 16, 64 (128-token prompts, 32 new tokens) for
     - the engine (paged cache, scheduler-free batch, tuned weight layout),
     - engine.reference.ContiguousDecoder: a plain loop of the same shape (contiguous cache,
       F.linear, scaled_dot_product_attention, no scheduler),
     - transformers' generate() on an equivalent random-weight LlamaConfig (optional: skipped
       with a note when transformers is not installed; `pip install -e '.[bench]'`);
     measured in interleaved rounds, median step after warm-up;
  3. the `tiny` sweep, whose shape the knob lesson teaches.
Prints a table and a JSON object (also saved to bench/results/engine_speed.json), with each target
and whether it was met.

    python bench/engine_speed.py [--rounds 3] [--batch-sizes 1,4,16,64]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from engine.config import EngineConfig  # noqa: E402
from engine.device import describe_device  # noqa: E402
from engine.hardware import measure_bandwidth, measure_matmul  # noqa: E402
from engine.llm_engine import LLMEngine  # noqa: E402
from engine.reference import ContiguousDecoder  # noqa: E402
from engine.sweep import WARMUP_STEPS, measure_point, sweep_prompts  # noqa: E402

PROMPT_LEN, NEW_TOKENS = 128, 32


def reference_step_ms(engine: LLMEngine, batch: int) -> float:
    """Median decode step of the plain contiguous loop, after the same warm-up steps."""
    prompts = torch.tensor(sweep_prompts(engine.tokenizer.vocab_size, batch, PROMPT_LEN, 0))
    decoder = ContiguousDecoder(engine.model, batch, PROMPT_LEN + NEW_TOKENS)
    token = decoder.forward(prompts)[:, -1].argmax(-1)
    steps = []
    for _ in range(NEW_TOKENS - 1):
        start = time.perf_counter()
        token = decoder.forward(token[:, None])[:, -1].argmax(-1)
        steps.append(time.perf_counter() - start)
    return 1000 * statistics.median(steps[WARMUP_STEPS:])


class HFRunner:
    """transformers' LlamaForCausalLM with the small preset's shape and its own random weights."""

    def __init__(self, cfg):
        from transformers import LlamaConfig, LlamaForCausalLM, LogitsProcessor

        hf_cfg = LlamaConfig(
            vocab_size=cfg.vocab, hidden_size=cfg.hidden, intermediate_size=cfg.intermediate,
            num_hidden_layers=cfg.layers, num_attention_heads=cfg.heads,
            num_key_value_heads=cfg.kv_heads, head_dim=cfg.head_dim,
            max_position_embeddings=cfg.context, rms_norm_eps=cfg.norm_eps,
            tie_word_embeddings=True, attn_implementation="sdpa",
        )
        torch.manual_seed(0)
        self.model = LlamaForCausalLM(hf_cfg).eval()
        self.vocab = cfg.vocab
        stamps = self.stamps = []

        class Stamp(LogitsProcessor):
            """Called once per generated token, right after that step's forward pass."""

            def __call__(self, input_ids, scores):
                stamps.append(time.perf_counter())
                return scores

        self.stamp = Stamp()

    def step_ms(self, batch: int) -> float:
        from transformers import LogitsProcessorList

        prompts = torch.tensor(sweep_prompts(self.vocab, batch, PROMPT_LEN, 0))
        self.stamps.clear()
        with torch.inference_mode():
            self.model.generate(
                prompts, attention_mask=torch.ones_like(prompts), max_new_tokens=NEW_TOKENS,
                min_new_tokens=NEW_TOKENS, do_sample=False, pad_token_id=0,
                logits_processor=LogitsProcessorList([self.stamp]),
            )
        gaps = [b - a for a, b in zip(self.stamps, self.stamps[1:])]
        return 1000 * statistics.median(gaps[WARMUP_STEPS:])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds per batch size")
    parser.add_argument("--batch-sizes", default="1,4,16,64")
    parser.add_argument("--no-hf", action="store_true", help="skip transformers")
    args = parser.parse_args()
    batches = [int(b) for b in args.batch_sizes.split(",")]
    load = os.getloadavg()[0]

    engine = LLMEngine(EngineConfig(preset="small", device="auto", kv_budget_bytes=2**30))
    device = engine.device
    print(f"device: {describe_device(device)}, threads {torch.get_num_threads()}, "
          f"load average before: {load:.2f}", file=sys.stderr)
    bandwidth = measure_bandwidth(device)
    gflops, mm_dtype = measure_matmul(device)
    weight_bytes = engine.model.weight_bytes()
    floor_ms = 1000 * weight_bytes / (bandwidth * 1e9)
    print(f"bandwidth {bandwidth:.1f} GB/s, matmul {gflops:.0f} GFLOP/s ({mm_dtype}), "
          f"small weights {weight_bytes / 1e6:.0f} MB -> floor {floor_ms:.1f} ms/step",
          file=sys.stderr)

    hf = None
    if not args.no_hf:
        try:
            hf = HFRunner(engine.model_config)
        except ImportError:
            print("transformers not installed: skipping its column", file=sys.stderr)
    engine.warm_up()

    rows = []
    floor_ratios = []  # batch-1 step / floor, the bandwidth measured again just before it
    for batch in batches:
        runs = {"engine": [], "reference": [], "transformers": []}
        for _ in range(args.rounds):
            round_bandwidth = measure_bandwidth(device) if batch == 1 else None
            runs["engine"].append(measure_point(engine, batch, PROMPT_LEN, NEW_TOKENS).tpot_ms)
            if round_bandwidth:
                round_floor_ms = 1000 * weight_bytes / (round_bandwidth * 1e9)
                floor_ratios.append(runs["engine"][-1] / round_floor_ms)
            runs["reference"].append(reference_step_ms(engine, batch))
            if hf:
                runs["transformers"].append(hf.step_ms(batch))
        row = {"batch_size": batch, **{k: statistics.median(v) for k, v in runs.items() if v}}
        row["compute_floor_ms"] = 1000 * 2 * engine.model_config.params * batch / (gflops * 1e9)
        row["engine_over_reference"] = row["engine"] / row["reference"]
        if hf:
            row["transformers_over_engine"] = row["transformers"] / row["engine"]
        rows.append(row)
        print(f"batch {batch:>3}: engine {row['engine']:7.1f} ms  reference "
              f"{row['reference']:7.1f} ms" + (f"  transformers {row['transformers']:7.1f} ms"
                                                 if hf else ""), file=sys.stderr)
    has_hf = hf is not None
    del engine, hf  # free their memory before the tiny sweep

    tiny = LLMEngine(EngineConfig(preset="tiny", device="auto", kv_budget_bytes=2**30))
    tiny_points = [measure_point(tiny, b, PROMPT_LEN, NEW_TOKENS).to_dict() for b in batches]
    tps = {p["batch_size"]: p["tokens_per_s"] for p in tiny_points}
    ms = [p["tpot_ms"] for p in tiny_points]

    by_batch = {r["batch_size"]: r for r in rows}
    targets = []

    def target(name: str, value: float, limit: float, ok: bool) -> None:
        targets.append({"target": name, "value": round(value, 3), "limit": limit, "met": ok})

    if 1 in by_batch:
        # Median over rounds of (step / floor), each floor from a bandwidth measured just
        # before that round's steps: the machine's bandwidth drifts with its neighbours' load.
        ratio = statistics.median(floor_ratios)
        target("small batch-1 step / (weight bytes / bandwidth)", ratio, 1.6, ratio <= 1.6)
        if has_hf:
            speedup = by_batch[1]["transformers_over_engine"]
            target("transformers / engine step at batch 1", speedup, 1.3, speedup >= 1.3)
    worst = max(r["engine_over_reference"] for r in rows)
    target("worst engine / reference step over batch sizes", worst, 1.15, worst <= 1.15)
    if {1, 4, 16, 64} <= tps.keys():
        gain = tps[64] / tps[1]
        target("tiny tokens/s at batch 64 / batch 1", gain, 3.0, gain >= 3.0)
        early, late = tps[4] / tps[1], tps[64] / tps[16]
        target("tiny gain 16->64 / gain 1->4 (must be < 1)", late / early, 1.0, late < early)
    rising = all(b >= a for a, b in zip(ms, ms[1:]))
    target("tiny ms/token rises with batch (1 = yes)", float(rising), 1.0, rising)

    result = {
        "device": describe_device(device),
        "threads": torch.get_num_threads(),
        "load_average_before": load,
        "load_average_after": os.getloadavg()[0],
        "memory_bandwidth_gbs": bandwidth,
        "matmul_gflops": gflops,
        "small_weight_bytes": weight_bytes,
        "bandwidth_floor_ms": floor_ms,
        "batch1_floor_ratios_per_round": floor_ratios,
        "prompt_len": PROMPT_LEN,
        "new_tokens": NEW_TOKENS,
        "small_step_ms": rows,
        "tiny_sweep": tiny_points,
        "targets": targets,
        "all_met": all(t["met"] for t in targets),
    }
    print()
    print(f"{'batch':>5} {'engine':>8} {'reference':>10} {'transformers':>13} {'compute floor':>14}"
          "   (small, ms per decode step)")
    for r in rows:
        print(f"{r['batch_size']:>5} {r['engine']:>8.1f} {r['reference']:>10.1f} "
              f"{r.get('transformers', float('nan')):>13.1f} {r['compute_floor_ms']:>14.1f}")
    print(f"bandwidth floor at batch 1: {floor_ms:.1f} ms")
    print()
    print(f"{'batch':>5} {'tiny tok/s':>11} {'ms/token':>9}")
    for p in tiny_points:
        print(f"{p['batch_size']:>5} {p['tokens_per_s']:>11.0f} {p['tpot_ms']:>9.2f}")
    print()
    for t in targets:
        print(f"[{'met' if t['met'] else 'MISSED'}] {t['target']}: {t['value']} (limit {t['limit']})")
    out = Path(__file__).resolve().parent / "results"
    out.mkdir(exist_ok=True)
    (out / "engine_speed.json").write_text(json.dumps(result, indent=1))
    print(json.dumps(result))
    return 0 if result["all_met"] else 1


if __name__ == "__main__":
    sys.exit(main())
