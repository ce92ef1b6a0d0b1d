"""How to multiply a few rows of activations by the weight matrices on this CPU, measured once.

A decode step multiplies B rows (one per sequence) by every weight matrix. The physics says a
memory-bound step should cost about the same for B = 1 and B = 8, but BLAS libraries pick their
inner kernels by shape, and for small B the choice is erratic: with MKL on a 2-core AVX2 machine,
W @ x.T (W stored out x in) streams a 768 x 3072 matrix twice as fast for 2 or 4 rows as for 8,
and one row is fastest as x @ W.T with W.T stored in x out (shared/PERF-NOTES.md has the table).
A single product also tends to be streamed by one core; cutting each matrix into one piece per
thread, multiplied as a batch (torch.bmm runs the pieces on different cores), streams faster.
Rather than hard-code one machine's quirks, the engine times the ways of doing every product of
a decode step, for each row count in TUNED_ROWS (every count up to 16, then 24, 32, 48 and 64),
and keeps the fastest:

- "x_wt": x @ W.T, from a stored copy of W.T cut by output columns into one (in x out/P)
  piece per thread (P pieces, `split_transposed`), multiplied as a batch of P; offered only
  where the C++ library is not built (the one-call step has no copies to read);
- "w_xt": (W @ x.T).T, from the usual (out x in) weight;
- "w_xt_split": the same with W viewed as P (out/P x in) pieces, multiplied as a batch (no copy);
- "w_xt_pad": W @ x.T with x padded with zero rows to PAD_ROWS (the extra rows are dropped),
  for libraries that are faster at that size;
- "linear": F.linear, what a plain loop does (so the plan is never slower than that loop's);
- "cpp": where the engine's C++ library is built, one call that reads each weight row once for
  all the rows (csrc/rows_matmul.cpp).

Where the C++ library is built, a decode step is one C++ call whichever of these the plan picks
(LlamaModel.decode_logits passes the choice as a STEP_PRODUCTS code): at batch 1 the Python
around each layer costs about as much as tiny's arithmetic, so no layout may bring it back.

Products are timed on the model's own weights, layer after layer as a step reads them: each
matrix is then read from memory, not from cache, as in a real step; one variant serves every
layer for a given row count (mixing layouts from one layer to the next was slower than any
single choice). The products' choice is then weighed in the whole decode step it makes
(engine/model/step_plan.py): the engine times its real step with the candidates at each row
count and keeps a plan whose step is never slower at fewer rows. A row count between two tuned
ones takes the larger one's choice (`rows_plan`). Plans are cached per machine (CPU, torch
version, threads), model shape and, where "cpp" was timed, the C++ library's build (a changed
kernel is timed again).

Timing every variant at every row count in every round costs a pass through the weights each
(small: 510 MB): so every variant is timed once at a row count, and only those within DROP of
the best are timed again (`time_variants`; "w_xt_pad" is not timed from PAD_ROWS rows on, where
it is "w_xt"), which makes the same choices in about half the time (`python
bench/engine/plan_tuning.py`). The app's set-up job and `python -m engine tune` time the lessons'
presets when a machine is first used, so that no reader waits for it.
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
PLAN_VERSION = 8  # the file's format and rules; a changed rule times every plan again
# The product layouts the C++ one-call decode step runs, with the code decode_model takes
# (csrc/fused_ops.cpp `product`).
STEP_PRODUCTS = {"cpp": 0, "linear": 1, "w_xt": 2, "w_xt_split": 3, "w_xt_pad": 4}
# After a round, a variant slower than the round's best by more than this is not timed again at
# that row count. A variant's first pass at a new row count can be 40% slower than its next
# ones (the first touch of its buffers): 1.5 drops only clear losers.
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
    """VARIANTS this process times: where the C++ library is built (and loaded), the layouts its
    one-call decode step runs (STEP_PRODUCTS); else every one but "cpp"."""
    from .cpu_kernel import rows_matmul_kernel

    if rows_matmul_kernel() is not None:
        return tuple(v for v in VARIANTS if v in STEP_PRODUCTS)
    return tuple(v for v in VARIANTS if v != "cpp")


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
    best are not timed again (they keep their time, which cannot be
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
            best = min(times[v] for v in left)
            left = [v for v in left if times[v] <= drop * best]
        if len(left) == 1 or done == repeats:
            break
        yield f"{said}: round {done}"
    return times


def choose(times: dict[str, float]) -> str:
    """The variant to use at one row count, from each variant's best time: the fastest ("cpp"
    on a tie: it needs no copy and no padding). The whole step then weighs it (step_plan)."""
    return min(times, key=lambda v: (times[v], v != "cpp"))


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


_plain_untimed = False  # plain_plans_untimed


def plain_plans_untimed(untimed: bool) -> None:
    """Whether a plan for the plain path (the C++ library not built) that is not on disk is
    left untimed in this process: the lab's worker says so while the app's set-up job is to
    build the kernels (engine.lab.jobs.engines), since the engines built before them are
    dropped once they are, and timing their plans (seconds to tens of seconds a model) made a
    newcomer's first point wait for a plan used for a minute. Such a model multiplies as torch
    lays the products out (F.linear), and measures on the plain path, labelled so."""
    global _plain_untimed
    _plain_untimed = untimed


def matmul_plan_steps(weights: list[torch.Tensor]) -> Steps[list[str] | None]:
    """matmul_plan in steps (tune_rows_steps' when it measures; none when the plan is on
    disk). The transposed copies "x_wt" is timed with are made only to measure, and let go.
    None (no plan: torch's own products) for a plain-path plan left untimed
    (plain_plans_untimed)."""
    variants, key = plan_key(weights)
    path = _plan_file()
    plans = _read_plans(path)
    if key not in plans and _plain_untimed and "cpp" not in variants:
        return None
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


def has_plan(weights: list[torch.Tensor], backend: str | None = None) -> bool:
    """Whether this machine's plans' file (for this process's thread count) has the products'
    plan for these weights, and with `backend`, the plan weighed in that backend's whole step
    (step_plan): only their dtype and shapes are read, so meta tensors do, and a set-up step
    need not make a model's weights to find out."""
    plans = _read_plans(_plan_file())
    key = plan_key(weights)[1]
    return key in plans and (backend is None or _step_key(key, backend) in plans)


def _step_key(key: str, backend: str) -> str:
    return f"{key}|step {backend}"


def step_plan(weights: list[torch.Tensor], backend: str) -> list[str] | None:
    """The plan weighed in the whole decode step on `backend` (one variant per TUNED_ROWS),
    from this machine's plans' file, or None where it has not been timed."""
    entry = _read_plans(_plan_file()).get(_step_key(plan_key(weights)[1], backend))
    if isinstance(entry, dict) and len(entry.get("plan", ())) == len(TUNED_ROWS):
        return list(entry["plan"])
    return None


def save_step_plan(weights: list[torch.Tensor], backend: str, plan: list[str],
                   seconds: list[float]) -> None:
    """Keep the plan weighed in the whole step, with each row count's step time (the
    monotonic rule's evidence: step_plan.broken reads it)."""
    path = _plan_file()
    plans = _read_plans(path)
    plans[_step_key(plan_key(weights)[1], backend)] = {
        "plan": plan, "step_ms": [round(1000 * t, 4) for t in seconds]}
    write_json_atomic(path, plans)
