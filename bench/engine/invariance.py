"""What the batch-invariant mode costs per decode step, at each batch size, against the default
mode, on one engine in one run (so the ratio shares the machine's load):

    python bench/engine/invariance.py [--preset tiny] [--batch-sizes 1,2,8,32,64] [--rounds 5]
                                      [--steps 8] [--backend auto]

At each batch size the engine prefills that many 48-token corpus prompts, then times rounds: in
each, `--steps` decode steps in the default mode and `--steps` in the batch-invariant mode
(engine/model/batch_invariant.py: every row computed alone), the order of the two flipped every
round so neither always goes first; a mode's time in a round is the median of its steps. Every
round is printed; the result is each batch's median over rounds of invariant / default. The same
sequences decode in both modes (the mode is the runner's switch), so both read the same
contexts. The load average is printed before and after.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.harness import Run  # noqa: E402

PROMPT_LEN = 48


def time_steps(engine, seqs, steps: int, invariant: bool) -> float:
    """The median of `steps` decode steps (ms) of every sequence, in the mode given."""
    engine.runner.batch_invariant = invariant
    times = []
    for _ in range(steps):
        for seq in seqs:
            engine.reserve(seq, 1)
        start = time.perf_counter()
        engine.step(seqs, [])
        times.append(1000 * (time.perf_counter() - start))
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="tiny")
    parser.add_argument("--backend", default="auto")
    parser.add_argument("--batch-sizes", default="1,2,8,32,64")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=8)
    args = parser.parse_args(argv)
    sizes = [int(b) for b in args.batch_sizes.split(",")]

    import numpy as np

    from engine.config import EngineConfig
    from engine.llm_engine import LLMEngine
    from engine.serve.workload import PromptSource

    run = Run("invariance", args)
    engine = LLMEngine(EngineConfig(preset=args.preset, device="cpu", backend=args.backend,
                                    kv_budget_bytes=2**28))
    engine.warm_up()
    source = PromptSource(engine.tokenizer, engine.model_config.vocab)
    per_batch = {}
    for batch in sizes:
        rng = np.random.default_rng(batch)
        new_tokens = 2 * args.steps * args.rounds + 4
        seqs = [engine.new_sequence(source.prompt(PROMPT_LEN, rng), new_tokens,
                                    ignore_eos=True) for _ in range(batch)]
        try:
            for seq in seqs:
                engine.reserve(seq, PROMPT_LEN)
            engine.step([], [(seq, PROMPT_LEN) for seq in seqs])
            ratios = []
            for i in range(args.rounds):
                order = (False, True) if i % 2 == 0 else (True, False)
                ms = {mode: time_steps(engine, seqs, args.steps, mode) for mode in order}
                ratios.append(ms[True] / ms[False])
                run.round({"batch": batch, "round": i + 1, "default_ms": round(ms[False], 3),
                           "invariant_ms": round(ms[True], 3), "ratio": round(ratios[-1], 2)},
                          f"batch {batch:>3} round {i + 1}: default {ms[False]:8.2f} ms, "
                          f"invariant {ms[True]:8.2f} ms, invariant / default "
                          f"{ratios[-1]:.2f}")
            per_batch[batch] = round(statistics.median(ratios), 2)
        finally:
            engine.runner.batch_invariant = False
            for seq in seqs:
                engine.release(seq)
    return run.finish({"preset": args.preset, "backend": engine.backend,
                       "invariant_over_default": per_batch})


if __name__ == "__main__":
    sys.exit(main())
