"""The capacity search: the most concurrent users a server holds within latency targets.

"How many users does this machine hold at P95 TTFT <= X ms and >= Y tokens/s each?" is the
question a serving team asks of a load test. The search answers it with whatever `measure` is
given (the engine on this machine, or a synthetic server of known capacity in the tests):

1. the loads it may try are a grid, `per_doubling` loads between each power of two and the next
   (4: 1, 2, 3, 4, 5, 6, 7, 8, 10, 11, 13, 16, 19, 23, 27, 32, ...: about 19% apart). That is
   its resolution, its "step": the answer is a load of the grid, and two searches on the same
   machine can differ by one step. Why not one user: past the batch size, a closed loop's
   queue wait grows with the users beyond it, so near 20 users on a batch of 8 one user moves
   the P95 TTFT by a few percent, while the same load measured twice on a small shared machine
   can differ by more than that (its own speed varies, engine.lab.quality); a step of one user
   there would be decided by the machine's mood, not by the load (bench/lab/capacity_search.py);
2. double the load from `lo` (1, 2, 4, ...) until a load fails the targets or `hi` is reached,
   then bisect on the grid between the last load that passed and the first that failed;
3. judge a load on every request of its trials pooled: its P95 TTFT and its median TPOT (the
   tokens/s each user gets is 1000 / that), each with a 95% bootstrap interval
   (engine.calc.stats). A load whose intervals lie on one side of both targets is decided after
   one trial; one whose interval straddles a target is measured again, up to `repeats` trials,
   and then judged on the pooled figures. So the trials go where the answer is decided, at the
   boundary, and a load far from it costs one trial.

The targets are engine.calc.slo_math.Targets, the record lesson 12's plan uses too: a load's
P95 TTFT is held to its TTFT, and its tokens/s each user to its per_user_tok_s (1000 / TPOT).

Why the first failing load failed comes from what was measured there (`cause`): requests
preempted for KV memory, time spent waiting in the queue, or slower steps (compute). The verdict
is one sentence. Torch-free: the search only calls `measure`.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from .slo_math import Targets
from .stats import Estimate, estimate, ratio_interval

QUEUE_SHARE = 0.5  # a TTFT more than half queue wait failed by queueing
PER_DOUBLING = 4  # the grid's loads between one power of two and the next (see the module doc)


@dataclass(frozen=True)
class Trial:
    """One run at a load (users, the concurrency): every finished request's TTFT, TPOT (its
    mean gap) and queue wait in ms, and the requests preempted (KV memory ran out)."""

    users: int
    ttft_ms: Sequence[float]
    tpot_ms: Sequence[float]
    queue_ms: Sequence[float] = ()
    preemptions: int = 0

    @property
    def ttft_p95_ms(self) -> float:
        return float(np.percentile(self.ttft_ms, 95))

    @property
    def per_user_tok_s(self) -> float:
        return 1000 / float(np.median(self.tpot_ms)) if self.tpot_ms else 0.0

    @property
    def median_queue_ms(self) -> float:
        return float(np.median(self.queue_ms)) if self.queue_ms else 0.0


@dataclass(frozen=True)
class Load:
    """A load and its trials, judged on their requests pooled."""

    users: int
    trials: tuple[Trial, ...]

    def _pooled(self, name: str) -> list[float]:
        return [v for t in self.trials for v in getattr(t, name)]

    @cached_property
    def ttft(self) -> Estimate:
        """P95 TTFT of every request of every trial, with its 95% interval and count."""
        return estimate(self._pooled("ttft_ms"), 95)

    @cached_property
    def tpot(self) -> Estimate:
        """The median request's TPOT, with its 95% interval and count."""
        return estimate(self._pooled("tpot_ms"), 50)

    @property
    def per_user_tok_s(self) -> float:
        return 1000 / self.tpot.value if self.tpot.value else 0.0

    @property
    def per_user_interval(self) -> tuple[float | None, float | None]:
        return ratio_interval(1000, self.tpot)

    @property
    def queue_ms(self) -> float:
        waits = self._pooled("queue_ms")
        return float(np.median(waits)) if waits else 0.0

    @property
    def preemptions(self) -> int:
        return int(statistics.median(t.preemptions for t in self.trials))

    def met(self, targets: Targets) -> bool:
        """Both targets met by the pooled figures."""
        return (self.ttft.value is not None and self.ttft.value <= targets.ttft_ms
                and self.per_user_tok_s >= targets.per_user_tok_s)

    def decided(self, targets: Targets) -> bool:
        """Whether the intervals settle the judgement: both on the passing side of their
        targets, or either on the failing side. Otherwise one more trial can change it."""
        t_lo, t_hi = self.ttft.lo, self.ttft.hi
        s_lo, s_hi = self.per_user_interval
        if None in (t_lo, t_hi, s_lo, s_hi):
            return False
        fails = t_lo > targets.ttft_ms or s_hi < targets.per_user_tok_s
        passes = t_hi <= targets.ttft_ms and s_lo >= targets.per_user_tok_s
        return fails or passes


def grid(lo: int, hi: int, per_doubling: int = PER_DOUBLING) -> list[int]:
    """The loads the search may try: lo, hi and every round(2^(k / per_doubling)) between."""
    steps = math.ceil(per_doubling * math.log2(max(hi, 2))) + 1
    loads = {round(2 ** (k / per_doubling)) for k in range(steps + 1)}
    return sorted({lo, hi, *(n for n in loads if lo <= n <= hi)})


@dataclass
class Capacity:
    """The search's answer: the most users that met the targets (0 if even `lo` failed), the
    first load that failed (None if `hi` passed), every load measured, and the verdict."""

    targets: Targets
    users: int
    first_failing: Load | None
    loads: list[Load] = field(default_factory=list)

    @property
    def cause(self) -> str:
        return cause(self.first_failing, self.targets) if self.first_failing else ""

    def verdict(self, hi: int) -> str:
        t = self.targets
        within = f"P95 TTFT <= {t.ttft_ms:g} ms and >= {t.per_user_tok_s:g} tokens/s each"
        if self.users == 0:
            return (f"This machine holds no load tried at {within}: even "
                    f"{self.first_failing.users} user(s) missed them ({self.cause}).")
        if self.first_failing is None:
            return (f"This machine holds at least {self.users} users at {within}: the most "
                    f"this search tries ({hi}).")
        return (f"This machine holds {self.users} users at {within}; past that "
                f"({self.first_failing.users} users, the search's next step), {self.cause}.")


def cause(load: Load, targets: Targets) -> str:
    """Why a load failed, in words, from what was measured at it."""
    if load.preemptions > 0:
        return (f"KV memory: {load.preemptions} request(s) were preempted for want of cache "
                "blocks and had to start again")
    ttft = load.ttft.value or 0.0
    if ttft > targets.ttft_ms and load.queue_ms > QUEUE_SHARE * ttft:
        return (f"queueing: requests waited {load.queue_ms:.0f} ms (median) for a place in "
                "the batch before their first token")
    return ("compute: every step serves more users, so each user's tokens come slower "
            f"({load.per_user_tok_s:.0f} tokens/s each)")


def find_capacity(measure: Callable[[int], Trial], targets: Targets, *, lo: int = 1,
                  hi: int = 64, repeats: int = 3, per_doubling: int = PER_DOUBLING,
                  progress: Callable[[Load], None] | None = None) -> Capacity:
    """The most users on the grid in [lo, hi] that meet the targets (see the module doc);
    measure(users) runs one trial; a load gets one to `repeats` trials."""
    if not 1 <= lo <= hi:
        raise ValueError(f"the search needs 1 <= lo <= hi (got lo={lo}, hi={hi})")
    if repeats < 1:
        raise ValueError(f"each load needs at least one trial (got {repeats})")
    if per_doubling < 1:
        raise ValueError(f"the grid needs at least one load per doubling (got {per_doubling})")
    loads = grid(lo, hi, per_doubling)
    measured: dict[int, Load] = {}

    def passes(i: int) -> bool:
        users = loads[i]
        if users not in measured:
            load = Load(users, (measure(users),))
            while len(load.trials) < repeats and not load.decided(targets):
                load = Load(users, (*load.trials, measure(users)))
            measured[users] = load
            if progress:
                progress(load)
        return measured[users].met(targets)

    if not passes(0):
        return Capacity(targets, 0, measured[lo], list(measured.values()))
    good, bad = 0, None
    while bad is None and good < len(loads) - 1:  # double until a load fails
        nxt = next((i for i in range(good + 1, len(loads)) if loads[i] >= 2 * loads[good]),
                   len(loads) - 1)
        if passes(nxt):
            good = nxt
        else:
            bad = nxt
    while bad is not None and bad - good > 1:  # bisect on the grid, to one step
        mid = (good + bad) // 2
        if passes(mid):
            good = mid
        else:
            bad = mid
    return Capacity(targets, loads[good], measured[loads[bad]] if bad is not None else None,
                    sorted(measured.values(), key=lambda load: load.users))
