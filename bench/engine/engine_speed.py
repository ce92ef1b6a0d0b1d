"""Engine speed against the machine's roofline, a plain reference loop, and Hugging Face generate().

In one run (so the ratios share the machine's mood):
  1. the device's limits, measured now (not cached): memory read bandwidth and matmul peak; the
     bandwidth again before every round, whose step is compared with that round's roofline
     bound, and the matmul peak again at the end (VMs of one class differ severalfold: the
     ratios against the limits measured beside them are what carry over);
  2. the decode step of `small` at batch 1, 2, 4, ..., 64 (128-token prompts, 32 new tokens):
     - the engine (paged cache, scheduler-free batch, tuned weight layout, CPU attention kernel),
     - engine.reference.ContiguousDecoder: a plain loop of the same shape (contiguous cache,
       F.linear, scaled_dot_product_attention, no scheduler),
     - transformers' generate() on an equivalent random-weight LlamaConfig, at batch 1 (optional:
       skipped with a note when transformers is not installed; `pip install -e '.[bench]'`),
     in interleaved rounds, median step after warm-up; and the roofline bound of each step,
     max(bytes / bandwidth, FLOPs / peak) with engine.calc.step_cost's formulas; every round's
     line says the limits it was compared with and the op calls of one engine step at that
     batch (torch.profiler's top-level calls: a count, independent of the load);
  3. a mixed-length step: 8 sequences of about 128 tokens and 1 of about 2048, against 9 of the
     same total context (decode cost must follow the sum of the lengths, not batch x longest),
     for `small` and `tiny`;
  4. the `tiny` sweep, whose shape the knob lesson teaches, with its op calls per step and its
     batch-1 step against its weights-over-bandwidth floor (tiny's weights fit a server CPU's
     last-level cache, whose faster floor engine/hardware.py's cache roof gives where measured).
Every round is printed as it is measured. Prints the tables, then through bench/harness.py each
target with its value and limit, met or MISSED, the load average before and after, and the JSON
result (saved to bench/results/engine_speed.json, its line appended to engine_speed.jsonl).

    python bench/engine/engine_speed.py [--rounds 3] [--batch-sizes 1,2,4,8,16,32,64] [--no-hf]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.harness import Run  # noqa: E402
from engine.calc.step_cost import decode_context, decode_cost  # noqa: E402
from engine.config import EngineConfig  # noqa: E402
from engine.device import describe_device, resolve_device  # noqa: E402
from engine.hardware import measure_bandwidth, measure_matmul  # noqa: E402
from engine.llm_engine import LLMEngine  # noqa: E402
from engine.model.cpu_kernel import KernelBuildError, build_kernel  # noqa: E402
from engine.reference import ContiguousDecoder  # noqa: E402
from engine.sweep import WARMUP_STEPS, measure_point, sweep_prompts  # noqa: E402

BOUND_EVERY, BOUND_ENDS = 2.0, 1.5  # small's step / roofline bound: at every batch; at 1 and 64

PROMPT_LEN, NEW_TOKENS = 128, 32
# The mixed-length case: contexts of about 8 x 128 + 2048 during the timed steps, against 9
# sequences holding the same total; MIXED_NEW_TOKENS decode steps each.
MIXED_NEW_TOKENS = 16
MIXED_PROMPTS = [128 - MIXED_NEW_TOKENS // 2] * 8 + [2048 - MIXED_NEW_TOKENS]
EVEN_PROMPTS = [sum(MIXED_PROMPTS) // 9] * 9
TINY_BATCHES = (1, 4, 16, 64)


def log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def op_calls_per_step(engine: LLMEngine, batch: int) -> int:
    """Top-level op calls of one decode step at this batch (torch.profiler; outside any timing)."""
    from torch.profiler import ProfilerActivity, profile

    prompts = sweep_prompts(engine.tokenizer.vocab_size, batch, 8, 0)
    seqs = [engine.new_sequence(p, 4, ignore_eos=True) for p in prompts]
    try:
        for seq in seqs:
            engine.reserve(seq, seq.num_uncomputed)
        engine.step([], [(seq, seq.num_uncomputed) for seq in seqs])
        for seq in seqs:
            engine.reserve(seq, 1)
        engine.step(seqs, [])  # the first decode step at this batch: not counted
        for seq in seqs:
            engine.reserve(seq, 1)
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            engine.step(seqs, [])
    finally:
        for seq in seqs:
            engine.release(seq)
    return sum(1 for event in prof.events() if event.cpu_parent is None)


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


def ragged_step_ms(engine: LLMEngine, prompt_lens: list[int], new_tokens: int) -> float:
    """Median decode step of sequences with these prompt lengths, each prefilled alone first."""
    prompts = [sweep_prompts(engine.tokenizer.vocab_size, 1, n, i)[0]
               for i, n in enumerate(prompt_lens)]
    seqs = [engine.new_sequence(p, new_tokens, ignore_eos=True) for p in prompts]
    steps = []
    try:
        for seq in seqs:
            engine.reserve(seq, seq.num_uncomputed)
            engine.step([], [(seq, seq.num_uncomputed)])
        for _ in range(new_tokens - 1):
            for seq in seqs:
                engine.reserve(seq, 1)
            start = time.perf_counter()
            engine.step(seqs, [])
            steps.append(time.perf_counter() - start)
    finally:
        for seq in seqs:
            engine.release(seq)
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


def measure_small(run: Run, engine: LLMEngine, hf: HFRunner | None, batches: list[int],
                  rounds: int, limits: dict) -> tuple[list[dict], list[float]]:
    """Rows of the small table (every round kept) and batch 1's step / floor per round. Each
    round measures the bandwidth first and prints the step against that round's roofline bound
    (with the run's matmul peak), and the op calls of one step."""
    shape = engine.model_config.describe(engine.device)
    weight_bytes = engine.model.weight_bytes()
    rows, floor_ratios = [], []
    for batch in batches:
        runs: dict[str, list[float]] = {"engine": [], "reference": []}
        if hf and batch == 1:
            runs["transformers"] = []
        calls = op_calls_per_step(engine, batch)
        cost = decode_cost(shape, batch, decode_context(PROMPT_LEN, NEW_TOKENS))
        flops_ms = 1000 * cost.flops / (limits["matmul_gflops"] * 1e9)
        round_ratios, round_bandwidths = [], []
        for r in range(rounds):
            bandwidth = measure_bandwidth(engine.device)
            round_bandwidths.append(bandwidth)
            runs["engine"].append(measure_point(engine, batch, PROMPT_LEN, NEW_TOKENS).tpot_ms)
            runs["reference"].append(reference_step_ms(engine, batch))
            if "transformers" in runs:
                runs["transformers"].append(hf.step_ms(batch))
            bound_ms = max(1000 * cost.bytes / (bandwidth * 1e9), flops_ms)
            round_ratios.append(runs["engine"][-1] / bound_ms)
            line = "  ".join(f"{k} {v[-1]:7.2f} ms" for k, v in runs.items())
            line += (f"  limits {bandwidth:.1f} GB/s, {limits['matmul_gflops']:.0f} GFLOP/s ->"
                     f" bound {bound_ms:.2f} ms, engine / bound {round_ratios[-1]:.3f},"
                     f" {calls} op calls per step")
            if batch == 1:
                floor_ms = 1000 * weight_bytes / (bandwidth * 1e9)
                floor_ratios.append(runs["engine"][-1] / floor_ms)
                line += f", engine / weights floor {floor_ratios[-1]:.3f}"
            run.round({"case": "small", "batch": batch, "round": r + 1,
                       **{f"{k}_ms": v[-1] for k, v in runs.items()},
                       "bandwidth_gbs": bandwidth, "engine_over_bound": round_ratios[-1]},
                      f"small batch {batch:>3} round {r + 1}: {line}")
        bytes_ms = 1000 * cost.bytes / (limits["bandwidth_gbs"] * 1e9)
        row = {"batch_size": batch, "rounds_ms": runs, "op_calls_per_step": calls,
               "bandwidth_gbs_per_round": round_bandwidths,
               "engine_over_bound_per_round": round_ratios,
               **{k: statistics.median(v) for k, v in runs.items()},
               "bytes": cost.bytes, "flops": cost.flops, "bytes_ms": bytes_ms,
               "flops_ms": flops_ms, "bound_ms": max(bytes_ms, flops_ms),
               "bound_by": "bytes" if bytes_ms >= flops_ms else "FLOPs"}
        row["engine_over_bound"] = row["engine"] / row["bound_ms"]
        row["engine_over_bound_own_rounds"] = statistics.median(round_ratios)
        row["engine_over_reference"] = row["engine"] / row["reference"]
        if "transformers" in row:
            row["transformers_over_engine"] = row["transformers"] / row["engine"]
        rows.append(row)
    return rows, floor_ratios


def measure_mixed(run: Run, engine: LLMEngine, name: str, rounds: int) -> dict:
    """One long context beside short ones against evenly spread contexts of the same total."""
    runs: dict[str, list[float]] = {"mixed": [], "even": []}
    for r in range(rounds):
        runs["mixed"].append(ragged_step_ms(engine, MIXED_PROMPTS, MIXED_NEW_TOKENS))
        runs["even"].append(ragged_step_ms(engine, EVEN_PROMPTS, MIXED_NEW_TOKENS))
        run.round({"case": f"{name} mixed lengths", "round": r + 1,
                   "mixed_ms": runs["mixed"][-1], "even_ms": runs["even"][-1]},
                  f"{name} mixed-length round {r + 1}: 8 x ~128 + 1 x ~2048 "
                  f"{runs['mixed'][-1]:7.2f} ms  9 x ~{EVEN_PROMPTS[0] + MIXED_NEW_TOKENS // 2} "
                  f"{runs['even'][-1]:7.2f} ms  ratio {runs['mixed'][-1] / runs['even'][-1]:.3f}")
    ratios = [m / e for m, e in zip(runs["mixed"], runs["even"])]
    return {"preset": name, "rounds_ms": runs, "mixed_ms": statistics.median(runs["mixed"]),
            "even_ms": statistics.median(runs["even"]), "ratio_per_round": ratios,
            "ratio": statistics.median(ratios)}


def measure_tiny(run: Run, engine: LLMEngine, rounds: int) -> list[dict]:
    """The tiny sweep, every round printed with that round's bandwidth, batch 1's step against
    tiny's weights over it, and each batch's op calls per step; each batch's median over
    rounds."""
    runs: dict[int, list[float]] = {b: [] for b in TINY_BATCHES}
    calls = {b: op_calls_per_step(engine, b) for b in TINY_BATCHES}
    floors: list[float] = []
    for r in range(rounds):
        bandwidth = measure_bandwidth(engine.device)
        for batch in TINY_BATCHES:
            runs[batch].append(measure_point(engine, batch, PROMPT_LEN, NEW_TOKENS).tpot_ms)
        floor_ms = 1000 * engine.model.weight_bytes() / (bandwidth * 1e9)
        floors.append(runs[1][-1] / floor_ms)
        run.round({"case": "tiny", "round": r + 1, "bandwidth_gbs": bandwidth,
                   **{f"batch_{b}_ms": runs[b][-1] for b in TINY_BATCHES}},
                  f"tiny round {r + 1}: " + "  ".join(
                      f"batch {b} {runs[b][-1]:.3f} ms ({calls[b]} op calls)"
                      for b in TINY_BATCHES)
                  + f"  limits {bandwidth:.1f} GB/s -> weights floor {floor_ms:.3f} ms, batch 1 / "
                    f"floor {floors[-1]:.3f}")
    points = []
    for batch in TINY_BATCHES:
        ms = statistics.median(runs[batch])
        points.append({"batch_size": batch, "tpot_ms": ms, "tokens_per_s": 1000 * batch / ms,
                       "rounds_ms": runs[batch], "op_calls_per_step": calls[batch]})
    points[0]["over_weights_floor_per_round"] = floors
    return points


def evaluate(run: Run, small: list[dict], floor_ratios: list[float], mixed: list[dict],
             tiny: list[dict]) -> None:
    """The targets, each a ratio measured in this run (or a count), given to the harness."""
    by_batch = {r["batch_size"]: r for r in small}
    worst = max(small, key=lambda r: r["engine_over_bound"])
    run.target(f"small: worst engine step / roofline bound (batch {worst['batch_size']})",
               worst["engine_over_bound"], at_most=BOUND_EVERY)
    for end in (1, 64):
        if end in by_batch:
            run.target(f"small batch {end}: engine step / roofline bound",
                       by_batch[end]["engine_over_bound"], at_most=BOUND_ENDS)
    if floor_ratios:
        run.target("small batch 1: engine step / bandwidth floor (weights / bandwidth that round)",
                   statistics.median(floor_ratios), at_most=1.35)
    worst = max(small, key=lambda r: r["engine_over_reference"])
    run.target(f"small: worst engine / reference loop step (batch {worst['batch_size']})",
               worst["engine_over_reference"], at_most=1.0)
    if 1 in by_batch and "transformers_over_engine" in by_batch[1]:
        run.target("small batch 1: transformers / engine step",
                   by_batch[1]["transformers_over_engine"], at_least=1.5)
    for case in mixed:
        run.target(f"{case['preset']}: step of 8 x 128 + 1 x 2048 / step of 9 x 341 tokens",
                   case["ratio"], at_most=1.3)
    ms = {p["batch_size"]: p["tpot_ms"] for p in tiny}
    tps = {p["batch_size"]: p["tokens_per_s"] for p in tiny}
    run.target("tiny batch 1: ms per decode step", ms[1], at_most=1.0)
    run.target("tiny batch 1: step / weights-over-bandwidth floor",
               statistics.median(tiny[0]["over_weights_floor_per_round"]), at_most=1.5)
    run.target("tiny batch 1: op calls per decode step", tiny[0]["op_calls_per_step"], at_most=12)
    early, late = tps[4] / tps[1], tps[64] / tps[16]
    run.target("tiny: gain 16->64 / gain 1->4 (concave: under 1)", late / early, at_most=1.0)
    run.target("tiny: tokens/s at batch 64 / batch 1", tps[64] / tps[1], at_least=3.0)
    rising = all(ms[b] >= ms[a] for a, b in zip(TINY_BATCHES, TINY_BATCHES[1:]))
    run.target("tiny: ms per step rises with batch (1 = yes)", float(rising), at_least=1.0)


def print_tables(small: list[dict], mixed: list[dict], tiny: list[dict], limits: dict) -> None:
    print(f"\nsmall, ms per decode step (median of rounds); roofline with {limits['bandwidth_gbs']:.1f}"
          f" GB/s and {limits['matmul_gflops']:.0f} GFLOP/s measured in this run")
    print(f"{'batch':>5} {'engine':>8} {'reference':>10} {'transformers':>13} {'MB':>7} "
          f"{'GFLOP':>7} {'bound':>7} {'bound by':>8} {'engine/bound':>13} {'engine/ref':>11}"
          f" {'op calls':>9}")
    for r in small:
        print(f"{r['batch_size']:>5} {r['engine']:>8.1f} {r['reference']:>10.1f} "
              f"{r.get('transformers', float('nan')):>13.1f} {r['bytes'] / 1e6:>7.0f} "
              f"{r['flops'] / 1e9:>7.2f} {r['bound_ms']:>7.1f} {r['bound_by']:>8} "
              f"{r['engine_over_bound']:>13.2f} {r['engine_over_reference']:>11.2f}"
              f" {r['op_calls_per_step']:>9}")
    print("\nmixed lengths, ms per decode step (median of rounds)")
    for case in mixed:
        print(f"{case['preset']:>6}: 8 x 128 + 1 x 2048 {case['mixed_ms']:7.2f}   9 x 341 "
              f"{case['even_ms']:7.2f}   ratio {case['ratio']:.3f}")
    print(f"\n{'batch':>5} {'tiny tok/s':>11} {'ms/step':>8} {'op calls':>9}")
    for p in tiny:
        print(f"{p['batch_size']:>5} {p['tokens_per_s']:>11.0f} {p['tpot_ms']:>8.3f}"
              f" {p['op_calls_per_step']:>9}")
    print()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds per case")
    parser.add_argument("--batch-sizes", default="1,2,4,8,16,32,64")
    parser.add_argument("--no-hf", action="store_true", help="skip transformers")
    args = parser.parse_args()
    batches = [int(b) for b in args.batch_sizes.split(",")]
    run = Run("engine_speed", args)
    if resolve_device("auto") == "cpu":  # engines never compile the CPU kernel: build it first
        try:
            build_kernel(lambda seconds: log(f"compiling the C++ decode kernel, {seconds:.0f} s"))
        except KernelBuildError as e:
            log(f"{e}: measuring the torch attention backend")

    engine = LLMEngine(EngineConfig(preset="small", device="auto", kv_budget_bytes=2**30))
    device = engine.device
    log(f"device: {describe_device(device)}, threads {torch.get_num_threads()}, attention "
        f"backend {engine.backend}")
    gflops, mm_dtype = measure_matmul(device)
    limits = {"bandwidth_gbs": measure_bandwidth(device), "matmul_gflops": gflops,
              "matmul_dtype": mm_dtype}
    log(f"bandwidth {limits['bandwidth_gbs']:.1f} GB/s, matmul {gflops:.0f} GFLOP/s ({mm_dtype}),"
        f" small weights {engine.model.weight_bytes() / 1e6:.0f} MB")
    hf = None
    if not args.no_hf:
        try:
            hf = HFRunner(engine.model_config)
        except ImportError:
            log("transformers not installed: skipping its column")
    engine.warm_up()

    small, floor_ratios = measure_small(run, engine, hf, batches, args.rounds, limits)
    mixed = [measure_mixed(run, engine, "small", args.rounds)]
    del engine, hf  # free their memory before tiny

    tiny_engine = LLMEngine(EngineConfig(preset="tiny", device="auto", kv_budget_bytes=2**30))
    tiny_engine.warm_up()
    mixed.append(measure_mixed(run, tiny_engine, "tiny", args.rounds))
    tiny = measure_tiny(run, tiny_engine, args.rounds)

    evaluate(run, small, floor_ratios, mixed, tiny)
    limits["matmul_gflops_at_end"] = measure_matmul(device)[0]
    log(f"limits at the end: matmul {limits['matmul_gflops_at_end']:.0f} GFLOP/s")
    result = {
        "device": describe_device(device),
        "threads": torch.get_num_threads(),
        "attention_backend": tiny_engine.backend,
        **limits,
        "prompt_len": PROMPT_LEN,
        "new_tokens": NEW_TOKENS,
        "batch1_floor_ratios_per_round": floor_ratios,
        "small_step_ms": small,
        "mixed_lengths": mixed,
        "tiny_sweep": tiny,
        "all_met": all(t["met"] for t in run.targets),
    }
    print_tables(small, mixed, tiny, limits)
    return run.finish(result)


if __name__ == "__main__":
    sys.exit(main())
