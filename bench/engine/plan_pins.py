"""A decode step with the measured matmul plan against every product pinned to one variant.

The plan (engine/model/matmul_plan.py) times the products alone, then weighs the candidates in
the whole decode step (engine/model/step_plan.py); this shows what each choice costs in a real
step at the batch sizes asked: rounds interleave the tuned plan and each pin (median step of each, every round
printed), on one engine, so they share the machine's load. Target, at each batch size: the tuned
plan's step at most 1.05x the best pin's (it chose among them by timing). The harness's JSON
result last (bench/harness.py).

    python bench/engine/plan_pins.py [--preset small] [--batch-sizes 1,16] [--pins cpp,w_xt_split]
                              [--rounds 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.harness import Run  # noqa: E402
from engine.config import EngineConfig  # noqa: E402
from engine.llm_engine import LLMEngine  # noqa: E402
from engine.model.layers import Linear  # noqa: E402
from engine.model.matmul_plan import MAX_TUNED_ROWS, VARIANTS  # noqa: E402
from engine.sweep import measure_point  # noqa: E402

PROMPT_LEN, NEW_TOKENS = 128, 32  # as bench/engine/engine_speed.py
TUNED_OVER_BEST_PIN = 1.05


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="small")
    parser.add_argument("--batch-sizes", default="1,16")
    parser.add_argument("--pins", default="cpp,w_xt_split")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    pins = args.pins.split(",")
    batches = [int(b) for b in args.batch_sizes.split(",")]
    if not set(pins) <= set(VARIANTS) or not all(1 <= b <= MAX_TUNED_ROWS for b in batches):
        parser.error(f"pins from {', '.join(VARIANTS)}; batch sizes 1..{MAX_TUNED_ROWS}")
    run = Run("plan_pins", args)
    engine = LLMEngine(EngineConfig(preset=args.preset, device="cpu", kv_budget_bytes=2**30))
    engine.warm_up()
    linears = [m for m in engine.model.modules() if isinstance(m, Linear)]
    tuned = linears[0].plan
    if tuned is None or ("cpp" in pins and engine.model.decode_model is None):
        parser.error("needs the C++ library: python -m engine build-kernel")
    medians = {}
    for batch in batches:
        print(f"{args.preset} batch {batch}: the tuned plan uses {tuned[batch - 1]}")
        runs: dict[str, list[float]] = {"tuned": [], **{pin: [] for pin in pins}}
        for r in range(args.rounds):
            for name in runs:
                for m in linears:  # the transposed copy is kept only while a plan has "x_wt"
                    m.prepare_for_cpu_decode(tuned if name == "tuned" else [name] * MAX_TUNED_ROWS)
                runs[name].append(measure_point(engine, batch, PROMPT_LEN, NEW_TOKENS).tpot_ms)
            for m in linears:
                m.prepare_for_cpu_decode(tuned)
            run.round({"batch": batch, "round": r + 1, **{k: v[-1] for k, v in runs.items()}},
                      f"  round {r + 1}: " + "  ".join(f"{k} {v[-1]:.2f} ms"
                                                      for k, v in runs.items()))
        medians[batch] = {k: statistics.median(v) for k, v in runs.items()}
        print("  median: " + "  ".join(f"{k} {v:.2f} ms" for k, v in medians[batch].items()))
        best_pin = min(medians[batch][pin] for pin in pins)
        run.target(f"{args.preset} batch {batch}: tuned step / best pin's",
                   medians[batch]["tuned"] / best_pin, at_most=TUNED_OVER_BEST_PIN)
    return run.finish({"preset": args.preset, "tuned_plan": tuned,
                       "median_tpot_ms": {str(b): m for b, m in medians.items()}})


if __name__ == "__main__":
    sys.exit(main())
