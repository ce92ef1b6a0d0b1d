"""Mixture of experts against batch size: the moe-mini engine (16 experts a layer, top-2) beside
the dense moe-mini-dense of the same active size (random weights both: timing only), one sweep
point of each at every batch size, interleaved, --rounds times.

Per point: the distinct experts a layer read per decode step (mean over steps and layers), a
uniform router's expectation E x (1 - (1 - k/E)^B), the weight MiB a step read from the
measured count (engine.calc.experts.step_weight_bytes; the dense model's are all its weights),
the median decode step (TPOT) and tokens/s. Figures, from the least disturbed round of each
(the lowest TPOT: other work only slows a step): moe / dense TPOT at each batch size, beside
moe / dense weight bytes. Targets: at batch 1 the MoE step reads at most 1.05x the dense step's
weights (the same active size), and at the largest batch its step takes at least 2x the dense
step (it reads about 5x the weights). Prints every round, a table, and the harness's JSON result
(bench/harness.py).

    python bench/engine/moe.py [--rounds 3] [--batches 1,2,4,8,16,32,64] [--prompt-len 64]
                               [--new-tokens 16] [--moe moe-mini] [--dense moe-mini-dense]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.harness import Run  # noqa: E402
from engine.config import EngineConfig  # noqa: E402
from engine.experts import measure_experts_point  # noqa: E402
from engine.llm_engine import LLMEngine  # noqa: E402

KV_BUDGET = 256 * 2**20


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batches", default="1,2,4,8,16,32,64")
    parser.add_argument("--prompt-len", type=int, default=64)
    parser.add_argument("--new-tokens", type=int, default=16)
    parser.add_argument("--moe", default="moe-mini", help="the MoE preset")
    parser.add_argument("--dense", default="moe-mini-dense",
                        help="the dense preset of its active size")
    args = parser.parse_args()
    batches = [int(b) for b in args.batches.split(",")]
    run = Run("moe", args)
    engines = {name: LLMEngine(EngineConfig(preset=name, kv_budget_bytes=KV_BUDGET))
               for name in (args.moe, args.dense)}
    best: dict[tuple[str, int], dict] = {}
    for r in range(args.rounds):
        for b in batches:
            for name, engine in engines.items():
                p = measure_experts_point(engine, b, args.prompt_len, args.new_tokens)
                figures = {"round": r + 1, "preset": name, "batch": b,
                           "experts_read": round(p.experts_read, 3),
                           "expected_experts": round(p.expected_experts, 3),
                           "weight_mib": round(p.step_weight_bytes / 2**20, 2),
                           "tpot_ms": round(p.point.tpot_ms, 3),
                           "tokens_per_s": round(p.point.tokens_per_s, 1),
                           "step_ms": p.point.step_ms}
                run.round(figures, f"round {r + 1} {name:>15} batch {b:>3}: experts "
                                   f"{p.experts_read:5.2f} (uniform {p.expected_experts:5.2f}), "
                                   f"{figures['weight_mib']:7.1f} MiB, TPOT "
                                   f"{p.point.tpot_ms:8.2f} ms, {p.point.tokens_per_s:8.1f} tok/s")
                key = (name, b)
                if key not in best or figures["tpot_ms"] < best[key]["tpot_ms"]:
                    best[key] = figures
    moe, dense = args.moe, args.dense
    table = []
    print(f"{'batch':>5} {'experts':>8} {'uniform':>8} {'MoE MiB':>8} {'dense MiB':>9} "
          f"{'MoE ms':>8} {'dense ms':>8} {'bytes x':>8} {'time x':>7}")
    for b in batches:
        m, d = best[(moe, b)], best[(dense, b)]
        row = {"batch": b, "experts_read": m["experts_read"],
               "expected_experts": m["expected_experts"], "moe_weight_mib": m["weight_mib"],
               "dense_weight_mib": d["weight_mib"], "moe_tpot_ms": m["tpot_ms"],
               "dense_tpot_ms": d["tpot_ms"], "moe_tokens_per_s": m["tokens_per_s"],
               "dense_tokens_per_s": d["tokens_per_s"],
               "bytes_ratio": round(m["weight_mib"] / d["weight_mib"], 3),
               "time_ratio": round(m["tpot_ms"] / d["tpot_ms"], 3)}
        table.append(row)
        print(f"{b:>5} {row['experts_read']:>8.2f} {row['expected_experts']:>8.2f} "
              f"{row['moe_weight_mib']:>8.1f} {row['dense_weight_mib']:>9.1f} "
              f"{row['moe_tpot_ms']:>8.2f} {row['dense_tpot_ms']:>8.2f} "
              f"{row['bytes_ratio']:>8.2f} {row['time_ratio']:>7.2f}")
    run.target("MoE / dense weight bytes at batch 1", table[0]["bytes_ratio"], at_most=1.05)
    run.target(f"MoE / dense TPOT at batch {batches[-1]}", table[-1]["time_ratio"],
               at_least=2.0)
    first = next(iter(engines.values()))
    return run.finish({"device": first.device, "backend": first.backend,
                       "path": first.path, "table": table})


if __name__ == "__main__":
    sys.exit(main())
