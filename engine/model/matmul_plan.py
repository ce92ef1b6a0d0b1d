"""How to multiply a few rows of activations by the weight matrices on this CPU, measured once.

A decode step multiplies B rows (one per sequence) by every weight matrix. The physics says a
memory-bound step should cost about the same for B = 1 and B = 8, but BLAS libraries pick their
inner kernels by shape, and for small B the choice is erratic: with MKL on a 2-core AVX2 machine,
W @ x.T (W stored out x in) streams a 768 x 3072 matrix at 24 GB/s for 2 or 4 rows and 12 GB/s for
8, and one row is fastest as x @ W.T with W.T stored in x out (shared/PERF-NOTES.md has the
table). A single product also tends to be streamed by one core: on that machine one row times
all of a GPT-2-small's matrices reached about 20 GB/s against 28 GB/s for summing the same
memory, and cutting each matrix into one piece per thread, multiplied as a batch (torch.bmm runs
the pieces on different cores), reached about 25. Rather than hard-code one machine's quirks,
the engine times five ways of doing every product of a decode step, for each row count in
TUNED_ROWS (every count up to 16, then 24, 32, 48 and 64), and keeps the fastest:

- "x_wt": x @ W.T, from a stored copy of W.T cut by output columns into one (in x out/P)
  piece per thread (P pieces, `split_transposed`), multiplied as a batch of P;
- "w_xt": (W @ x.T).T, from the usual (out x in) weight;
- "w_xt_split": the same with W viewed as P (out/P x in) pieces, multiplied as a batch (no copy);
- "w_xt_pad": W @ x.T with x padded with zero rows to PAD_ROWS (the extra rows are dropped),
  for libraries that are faster at that size;
- "linear": F.linear, what a plain loop does (so the plan is never slower than that loop's);
- "cpp": where the engine's C++ library is built (`python -m engine build-kernel`), one call that
  reads each weight row once for all the rows (csrc/rows_matmul.cpp): at batch 1 the others'
  three to five op calls cost about as much as the arithmetic of tiny's matrices.

It is timed on the model's own weights, layer after layer as a step reads them: each matrix is
then read from memory, not from cache, as in a real step, and mixing layouts from one layer to
the next turned out slower than any single choice, so one variant serves every layer for a given
row count. A row count between two tuned ones takes the larger one's choice (`rows_plan`). Plans
are cached per machine (CPU, torch version, threads), model shape and, where "cpp" was timed, the
C++ library's build (a changed kernel is timed again).
"cpp" is kept where it is within ONE_CALL_MARGIN of the fastest (`choose`): a plan of "cpp" at a
row count also makes the whole decode step one C++ call (LlamaModel.decode_logits), which saves
the Python around every layer that timing the products alone does not see.
Timing costs the first use of a model on a machine: 20 s for small on one core of the 2-core
machine, one pass through 510 MB of weights for each variant, round and row count. So every
variant is timed once at a row count, and only those within DROP of the best are timed again
(`time_variants`; "w_xt_pad" is not timed from PAD_ROWS rows on, where it is "w_xt"): 12 s
for small, 0.58 of timing every variant every round, with the same choices (`python
bench/plan_tuning.py`); `python -m engine tune` times the lessons' presets as part of a
machine's set-up, so that no reader waits for it.
Above MAX_TUNED_ROWS rows (prefill, very large batches) the product is compute-bound and F.linear
is used.

A new weight format (for example int8 weights with scales) adds its variants to `multiply` and
VARIANTS, and its own entry in the plan's key (the dtype and shapes of the weights).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from functools import partial

import torch
import torch.nn.functional as F

from ..device import describe_device
from ..paths import cache_dir, write_json_atomic
from ..steps import Steps, run_steps

VARIANTS = ("x_wt", "w_xt", "w_xt_split", "w_xt_pad", "linear", "cpp")
TUNED_ROWS = (*range(1, 17), 24, 32, 48, 64)
MAX_TUNED_ROWS = TUNED_ROWS[-1]
PAD_ROWS = 16
PLAN_VERSION = 7  # 7: "cpp" kept within ONE_CALL_MARGIN of the fastest (choose)
# How much slower, timed alone, the products may be in "cpp" and still be chosen. On the 2-core
# machine, with a margin of 5%, the tuning picked "w_xt_split" for small at 1 row, although the
# step with every product pinned to "cpp" (one call) was 5% faster than the tuned one in every
# round (`python bench/plan_pins.py`: medians of 3 interleaved rounds 10.05 against 10.56 ms).
ONE_CALL_MARGIN = 1.10
# After a round, a variant slower than the round's best by more than this (by `choose`'s measure)
# is not timed again at that row count. The first pass of a variant at a new row count was up to
# 43% slower than its next ones on the 2-core machine (x_wt on tiny): 1.5 drops only clear losers.
DROP = 1.5


def pieces(out_features: int) -> int:
    """How many pieces a matrix is cut into: one per thread, or fewer so they are equal."""
    return next(p for p in range(min(torch.get_num_threads(), out_features), 0, -1)
                if out_features % p == 0)


def split_transposed(weight: torch.Tensor) -> torch.Tensor:
    """W (out x in) as W.T cut by columns: (P, in, out/P), each piece contiguous."""
    count = pieces(weight.shape[0])
    return weight.t().reshape(weight.shape[1], count, -1).permute(1, 0, 2).contiguous()


def multiply(rows: torch.Tensor, weight: torch.Tensor, weight_t: torch.Tensor,
             variant: str) -> torch.Tensor:
    """rows (M, in) times the weight, the way `variant` says; returns (M, out).
    weight_t is split_transposed(weight). Written with as few op calls as each layout allows
    (one row's product is a plain view of the pieces', with no transposes): each call costs a
    few microseconds, about what streaming a small matrix does."""
    count = rows.shape[0]
    if variant == "cpp":
        return torch.ops.engine_cpu.rows_matmul(rows, weight)
    if variant == "x_wt":
        out = torch.bmm(rows.expand(weight_t.shape[0], -1, -1), weight_t)  # (P, M, out/P)
        return out.view(1, -1) if count == 1 else out.permute(1, 0, 2).reshape(count, -1)
    if variant == "w_xt_split":  # as many pieces as split_transposed cuts
        count_pieces = weight_t.shape[0] if weight_t is not None else pieces(weight.shape[0])
        out = torch.bmm(weight.view(count_pieces, -1, weight.shape[1]),
                        rows.t().expand(count_pieces, -1, -1))  # (P, out/P, M)
        return out.view(1, -1) if count == 1 else out.reshape(-1, count).t()
    if variant == "w_xt_pad" and count < PAD_ROWS:
        padded = torch.cat([rows, rows.new_zeros(PAD_ROWS - count, rows.shape[1])])
        return torch.mm(weight, padded.t()).t()[:count]
    if variant in ("w_xt", "w_xt_pad"):
        out = torch.mm(weight, rows.t())  # (out, M)
        return out.view(1, -1) if count == 1 else out.t()
    return F.linear(rows, weight)


def available_variants() -> tuple[str, ...]:
    """VARIANTS this process can run: "cpp" only where the C++ library is built (and loaded)."""
    from .cpu_kernel import rows_matmul_kernel

    return VARIANTS if rows_matmul_kernel() is not None else VARIANTS[:-1]


def tune_rows(weights: list[tuple[torch.Tensor, torch.Tensor]], budget_s: float = 3.0,
              max_repeats: int = 5, variants: tuple[str, ...] | None = None,
              drop: float | None = DROP) -> list[str]:
    """The fastest of `variants` (default: available_variants()) for each row count of
    TUNED_ROWS, over passes through all (W, split_transposed(W)) pairs in order. Variants are
    timed interleaved and the best pass kept, so a passing hiccup on a shared machine rarely
    decides; drop=None times every variant in every round (as before DROP)."""
    return run_steps(tune_rows_steps(weights, budget_s, max_repeats, variants, drop))


def tune_rows_steps(weights: list[tuple[torch.Tensor, torch.Tensor]], budget_s: float = 3.0,
                    max_repeats: int = 5, variants: tuple[str, ...] | None = None,
                    drop: float | None = DROP) -> Steps[list[str]]:
    """tune_rows in steps: yields after each round of a row count's timing and after each
    count (what is done, in words) and returns the plan. Its caller may stop between two steps
    and go on later (the engine service pauses a model's build for other readers' short jobs,
    in 2 s turns; a step is at most one pass of each variant, 1 s for small at 64 rows on one
    core): a round is timed in one go, so every variant of it meets the same machine."""
    variants = variants or available_variants()
    inputs = {w.shape[1]: torch.randn(MAX_TUNED_ROWS, w.shape[1], dtype=w.dtype)
              for w, _ in weights}

    def one_pass(count: int, variant: str) -> float:
        start = time.perf_counter()
        for w, w_t in weights:
            multiply(inputs[w.shape[1]][:count], w, w_t, variant)
        return time.perf_counter() - start

    first = one_pass(1, "x_wt")
    calls = len(TUNED_ROWS) * len(variants)
    repeats = int(min(max_repeats, max(2, budget_s / (calls * first))))
    plan = []
    for count in TUNED_ROWS:
        timed = variants
        if drop is not None and count >= PAD_ROWS:  # no padding there: the same as "w_xt"
            timed = tuple(v for v in variants if v != "w_xt_pad" or "w_xt" not in variants)
        said = f"matrix products timed for {len(plan)} of {len(TUNED_ROWS)} batch sizes"
        times = yield from time_variants_steps(partial(one_pass, count), timed, repeats, drop,
                                               f"{said}, {count} rows")
        plan.append(choose(times))
        yield f"matrix products timed for {len(plan)} of {len(TUNED_ROWS)} batch sizes"
    return plan


def time_variants(one_pass: Callable[[str], float], variants: tuple[str, ...], repeats: int,
                  drop: float | None = DROP) -> dict[str, float]:
    """Each variant's best of up to `repeats` passes (`one_pass(variant)`: seconds), in
    interleaved rounds. After each round the variants more than `drop` times slower than the
    best, as `choose` weighs them, are not timed again (they keep their time, which cannot be
    chosen); once one is left the choice is clear and timing stops. drop=None: every round
    times every variant."""
    return run_steps(time_variants_steps(one_pass, variants, repeats, drop))


def time_variants_steps(one_pass: Callable[[str], float], variants: tuple[str, ...],
                        repeats: int, drop: float | None = DROP, said: str = "timing",
                        ) -> Steps[dict[str, float]]:
    """time_variants, yielding after each round but the last ("<said>: round r")."""
    times = dict.fromkeys(variants, float("inf"))
    left = list(variants)
    for done in range(1, repeats + 1):
        for variant in left:
            times[variant] = min(times[variant], one_pass(variant))
        if drop is not None:
            best = min(_weighed(v, times[v]) for v in left)
            left = [v for v in left if _weighed(v, times[v]) <= drop * best]
        if len(left) == 1 or done == repeats:
            break
        yield f"{said}: round {done}"
    return times


def choose(times: dict[str, float]) -> str:
    """The variant to use at one row count, from each variant's best time: the fastest, or "cpp"
    where it is within ONE_CALL_MARGIN of it (the one-call step then saves more than that)."""
    return min(times, key=lambda v: (_weighed(v, times[v]), v != "cpp"))


def _weighed(variant: str, seconds: float) -> float:
    """A time as `choose` compares it: "cpp"'s divided by ONE_CALL_MARGIN."""
    return seconds / ONE_CALL_MARGIN if variant == "cpp" else seconds


def rows_plan(tuned: list[str]) -> list[str]:
    """The variant for every row count 1..MAX_TUNED_ROWS, from the choices at TUNED_ROWS: a count
    between two tuned ones takes the larger one's choice."""
    return [next(v for rows, v in zip(TUNED_ROWS, tuned) if rows >= count)
            for count in range(1, MAX_TUNED_ROWS + 1)]


def _plan_file():
    key = f"{describe_device('cpu')}|torch {torch.__version__}|threads {torch.get_num_threads()}"
    safe = "".join(c if c.isalnum() else "_" for c in key)[:150]
    return cache_dir() / f"matmul-plan-v{PLAN_VERSION}-{safe}.json"


def matmul_plan(weights: list[torch.Tensor]) -> list[str]:
    """The variant for every row count 1..MAX_TUNED_ROWS (rows_plan) for a model whose decode
    step reads these weights (out x in) in this order: from the machine's cache file, or
    measured (a few seconds) and saved."""
    return run_steps(matmul_plan_steps(weights))


def matmul_plan_steps(weights: list[torch.Tensor]) -> Steps[list[str]]:
    """matmul_plan in steps (tune_rows_steps' when it measures; none when the plan is on
    disk). The transposed copies "x_wt" is timed with are made only to measure, and let go."""
    variants, key = plan_key(weights)
    path = _plan_file()
    plans = _read_plans(path)
    if key not in plans:
        pairs = [(w, split_transposed(w)) for w in weights]
        yield "weights laid out for timing"
        tuned = yield from tune_rows_steps(pairs, variants=variants)
        del pairs
        plans = _read_plans(path)  # as it is now: another model's plan may have been saved
        plans[key] = tuned
        write_json_atomic(path, plans)
    return rows_plan(plans[key])


def plan_key(weights: list[torch.Tensor]) -> tuple[tuple[str, ...], str]:
    """The variants a plan for these weights is timed with, and its key in the plans' file: the
    weights' dtype and shapes, and where "cpp" is timed, the C++ library's build (a plan made
    with another build is timed again)."""
    dtype = str(weights[0].dtype).removeprefix("torch.")
    variants = available_variants() if dtype == "float32" else VARIANTS[:-1]
    key = dtype + ":" + ",".join(f"{w.shape[0]}x{w.shape[1]}" for w in weights)
    if "cpp" in variants:
        from .cpu_kernel import source_digest

        key += f"|cpp {source_digest()}"
    return variants, key


def _read_plans(path) -> dict:
    if path.exists():
        try:
            return json.loads(path.read_text())
        except ValueError:
            pass
    return {}


def has_plan(weights: list[torch.Tensor]) -> bool:
    """Whether this machine's plans' file (for this process's thread count) has the plan for
    these weights: only their dtype and shapes are read, so meta tensors do, and a set-up step
    (`python -m engine tune`) need not make a model's weights to find out."""
    return plan_key(weights)[1] in _read_plans(_plan_file())
