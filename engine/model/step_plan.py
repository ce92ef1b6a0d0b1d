"""The matrix-product plan weighed in the whole decode step it makes, with no slow path at few rows.

Timing the products alone (matmul_plan) misses what the step does around them: the op calls of
a step whose products are not the C++ library's, the attention and the sampler at that row count,
and how one layout's output feeds the next op. Close calls between products alone then decide by
noise, and a plan can make the step at 1 row slower than at 4, which reads backwards in a lesson
whose point is that a batch's step costs more than a single row's. So the engine times its own
decode step (LLMEngine.time_decode_steps) with the candidates at each tuned row count: the
products' choice and "cpp" where the C++ library is built, and keeps the faster.

Then the choices are made monotonic: going down from the largest row count, a count whose step
is slower than a larger count's (by more than SLACK, the timings' own noise) is timed again, with the larger count's choice among its
candidates, up to RETIMES times. A row count whose step stays slower after that is left as
measured, and said (`broken`): the rule is about the plan's choices, and a choice that measures
slower twice against every candidate is the machine's, not the plan's.

Pure: `settle_steps` takes the timing as a function, so its rules are table tests on recorded
timings (tests/engine/model/test_step_plan.py).
"""

from __future__ import annotations

from collections.abc import Callable

from ..steps import Steps
from .matmul_plan import TUNED_ROWS

# A step timed again this many times at most when it is slower than a larger batch's.
RETIMES = 2
# How much slower than a larger batch's a step may measure and count as no slower: a memory-bound
# step is nearly flat over its first row counts, where a best-of-rounds time still varies by a
# few percent from one timing to the next; beyond that, a slower step is the plan's to fix.
SLACK = 1.03
# Interleaved rounds of each candidate's step per timing; each candidate keeps its best.
ROUNDS = 3

# time_steps(rows, candidates) -> {candidate: best seconds of a whole decode step at that many
# rows}, or None where the engine cannot run that many rows (its KV pool is too small).
TimeSteps = Callable[[int, tuple[str, ...]], "dict[str, float] | None"]


def _unique(*names: str) -> tuple[str, ...]:
    return tuple(dict.fromkeys(names))


def settle_steps(tuned: list[str], extra: tuple[str, ...], time_steps: TimeSteps,
                 retimes: int = RETIMES) -> Steps[tuple[list[str], list[float]] | None]:
    """The variant for each row count of TUNED_ROWS and its step's best seconds, from the
    products' choices `tuned` (one per TUNED_ROWS) and `extra` candidates timed beside them in
    the whole step; yields after each row count and each re-timing. None where the engine could
    not time every row count (the caller keeps the products' plan and tries again later)."""
    times: list[dict[str, float]] = []
    for done, rows in enumerate(TUNED_ROWS, 1):
        measured = time_steps(rows, _unique(tuned[done - 1], *extra))
        if measured is None:
            return None
        times.append(dict(measured))
        yield f"decode steps timed for {done} of {len(TUNED_ROWS)} batch sizes"
    for i in reversed(range(len(TUNED_ROWS) - 1)):
        for _ in range(retimes):
            j = faster_larger(times, i)
            if j is None:
                break
            candidates = _unique(*times[i], fastest(times[j]))
            again = time_steps(TUNED_ROWS[i], candidates)
            if again is None:
                return None
            for variant, seconds in again.items():
                times[i][variant] = min(times[i].get(variant, float("inf")), seconds)
            yield (f"decode step at {TUNED_ROWS[i]} rows timed again: slower than at "
                   f"{TUNED_ROWS[j]} rows")
    plan = [fastest(t) for t in times]
    return plan, [t[v] for t, v in zip(times, plan)]


def fastest(times: dict[str, float]) -> str:
    """The candidate with the fastest step ("cpp" on a tie)."""
    return min(times, key=lambda v: (times[v], v != "cpp"))


def faster_larger(times: list[dict[str, float]], i: int) -> int | None:
    """The index of the larger row count whose best step is the fastest, where row count i's
    best step is slower than it by more than SLACK; else None (i is no slower)."""
    best = [min(t.values()) for t in times]
    j = min(range(i + 1, len(times)), key=best.__getitem__)
    return j if best[i] > SLACK * best[j] else None


def broken(seconds: list[float]) -> list[int]:
    """The row counts of TUNED_ROWS whose step is slower than some larger count's by more
    than SLACK."""
    return [TUNED_ROWS[i] for i in range(len(seconds) - 1)
            if seconds[i] > SLACK * min(seconds[i + 1:])]
