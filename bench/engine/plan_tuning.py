"""What timing the matrix-product plan costs, and what it chooses: every variant in every round
(drop=None, the way up to DROP) against dropping clear losers after each round (DROP), in one run.

    python bench/engine/plan_tuning.py [--presets tiny,small] [--rounds 2] [--batch-sizes 1,4,16,64]
                                [--step-rounds 3]

Pinned like the lab's worker (engine.cli.tune.pin_like_the_worker: on a 2-core machine one
thread on the engine's core). For each preset it builds an engine, then times the plan both ways,
`--rounds` times in alternating order, on the engine's own weights, printing every round's
seconds and choices (row count ranges) and the ratio. Where the two ways' last plans differ at
one of --batch-sizes, it then runs decode steps with each plan (median of --step-rounds
interleaved rounds of bench/engine/plan_pins.py's point), so a different choice shows what it costs.
The full timing's own rounds differ from each other too (near ties, noise): both are printed.
Targets: pruning takes at most the full timing's seconds, and where the plans differ the pruned
plan's step is at most 1.05x the full one's. The harness's JSON result last (bench/harness.py).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.harness import Run  # noqa: E402
from engine.cli.tune import pin_like_the_worker  # noqa: E402
from engine.config import EngineConfig  # noqa: E402
from engine.llm_engine import LLMEngine  # noqa: E402
from engine.model.layers import Linear  # noqa: E402
from engine.model.matmul_plan import (  # noqa: E402
    DROP,
    MAX_TUNED_ROWS,
    TUNED_ROWS,
    rows_plan,
    split_transposed,
    tune_rows,
)
from engine.sweep import measure_point  # noqa: E402

PROMPT_LEN, NEW_TOKENS = 128, 32  # as bench/engine/plan_pins.py
PRUNED_OVER_FULL_SECONDS = 1.0  # dropping clear losers never costs more time than keeping them
PRUNED_OVER_FULL_STEP = 1.05  # nor a slower step, where it chooses differently


def ranges(plan: list[str]) -> str:
    """A tuned plan in words: "1-3 cpp, 4-5 w_xt, 6-64 cpp"."""
    parts: list[tuple[int, int, str]] = []
    for rows, variant in zip(TUNED_ROWS, plan):
        if parts and parts[-1][2] == variant:
            parts[-1] = (parts[-1][0], rows, variant)
        else:
            parts.append((rows, rows, variant))
    return ", ".join(f"{a}-{b} {v}" if a != b else f"{a} {v}" for a, b, v in parts)


def compare_steps(run: Run, preset: str, engine: LLMEngine, linears: list[Linear],
                  plans: dict[str, list[str]], batches: list[int], rounds: int) -> dict:
    """Decode steps with each plan at the batch sizes where they differ, rounds interleaved:
    each batch's median step of each plan."""
    every = {name: rows_plan(plan) for name, plan in plans.items()}
    differ = [b for b in batches if len({p[b - 1] for p in every.values()}) > 1]
    if not differ:
        print("  the last plans choose the same at batch sizes "
              + ", ".join(map(str, batches)) + ": no step to compare")
    medians = {}
    for batch in differ:
        print(f"  batch {batch}: " + ", ".join(f"{n} uses {p[batch - 1]}" for n, p in every.items()))
        tpot: dict[str, list[float]] = {name: [] for name in every}
        for r in range(rounds):
            for name, plan in every.items():
                for m in linears:
                    m.plan = plan
                tpot[name].append(measure_point(engine, batch, PROMPT_LEN, NEW_TOKENS).tpot_ms)
            run.round({"preset": preset, "batch": batch, "round": r + 1,
                       **{f"{n}_tpot_ms": v[-1] for n, v in tpot.items()}},
                      f"    round {r + 1}: " + "  ".join(f"{n} {v[-1]:.2f} ms"
                                                        for n, v in tpot.items()))
        full, pruned = (statistics.median(v) for v in tpot.values())
        medians[batch] = {"full_tpot_ms": full, "pruned_tpot_ms": pruned}
        print(f"    median: full {full:.2f} ms, pruned {pruned:.2f} ms: pruned / full "
              f"{pruned / full:.3f}")
        run.target(f"{preset} batch {batch}: pruned plan's step / full plan's", pruned / full,
                   at_most=PRUNED_OVER_FULL_STEP)
    return medians


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--presets", default="tiny,small")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--batch-sizes", default="1,4,16,64")
    parser.add_argument("--step-rounds", type=int, default=3)
    args = parser.parse_args()
    batches = [int(b) for b in args.batch_sizes.split(",")]
    if not all(1 <= b <= MAX_TUNED_ROWS for b in batches) or args.rounds < 1:
        parser.error(f"batch sizes 1..{MAX_TUNED_ROWS}; at least one round")
    run = Run("plan_tuning", args)
    split = pin_like_the_worker()
    print(f"pinned like the lab's worker: cores {list(split.engine)}; DROP {DROP}")
    result: dict[str, dict] = {}
    for preset in args.presets.split(","):
        engine = LLMEngine(EngineConfig(preset=preset, device="cpu", kv_budget_bytes=2**30))
        engine.warm_up()
        linears = [m for m in engine.model.modules() if isinstance(m, Linear)]
        pairs = [(m.weight.detach(), split_transposed(m.weight.detach())) for m in linears]
        seconds: dict[str, list[float]] = {"full": [], "pruned": []}
        plans: dict[str, list[str]] = {}
        for r in range(args.rounds):
            order = ["full", "pruned"] if r % 2 == 0 else ["pruned", "full"]
            for name in order:
                start = time.perf_counter()
                plans[name] = tune_rows(pairs, drop=None if name == "full" else DROP)
                seconds[name].append(time.perf_counter() - start)
                print(f"{preset} round {r + 1} {name:<6} {seconds[name][-1]:5.1f} s: "
                      f"{ranges(plans[name])}", flush=True)
            differ = sum(a != b for a, b in zip(plans["full"], plans["pruned"]))
            run.round({"preset": preset, "round": r + 1, "full_s": seconds["full"][-1],
                       "pruned_s": seconds["pruned"][-1], "rows_chosen_differently": differ},
                      f"{preset} round {r + 1} pruned / full "
                      f"{seconds['pruned'][-1] / seconds['full'][-1]:.3f}; row counts chosen "
                      f"differently: {differ} of {len(TUNED_ROWS)}")
        full, pruned = (statistics.median(v) for v in seconds.values())
        print(f"{preset} median: full {full:.1f} s, pruned {pruned:.1f} s: pruned / full "
              f"{pruned / full:.3f}")
        run.target(f"{preset}: pruned timing's seconds / full timing's", pruned / full,
                   at_most=PRUNED_OVER_FULL_SECONDS)
        steps = compare_steps(run, preset, engine, linears,
                              {"full": plans["full"], "pruned": plans["pruned"]},
                              batches, args.step_rounds)
        result[preset] = {"full_s": full, "pruned_s": pruned, "full_plan": ranges(plans["full"]),
                          "pruned_plan": ranges(plans["pruned"]),
                          "steps": {str(b): m for b, m in steps.items()}}
        del engine, linears, pairs
    return run.finish({"drop": DROP, "presets": result})


if __name__ == "__main__":
    sys.exit(main())
