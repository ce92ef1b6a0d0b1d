"""The capacity search: the most concurrent users a server holds within latency targets.

"How many users does this machine hold at P95 TTFT <= X ms and >= Y tokens/s each?" is the
question a serving team asks of a load test. The search answers it with whatever `measure` is
given (the engine on this machine, or a synthetic server of known capacity in the tests):

1. measure each load `repeats` times and judge the median of the repeats, so one noisy run
   does not move the answer;
2. double the load from `lo` (1, 2, 4, ...) until a load fails the targets or `hi` is reached;
3. bisect between the last load that passed and the first that failed, to one user.

A load's figures are the P95 TTFT (ms) and the tokens/s each user got (1000 / their median TPOT);
why the first failing load failed comes from what was measured there (`cause`): requests
preempted for KV memory, time spent waiting in the queue, or slower steps (compute). The verdict
is one sentence. Torch-free: the search only calls `measure`.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass, field

QUEUE_SHARE = 0.5  # a TTFT more than half queue wait failed by queueing


@dataclass(frozen=True)
class Trial:
    """One run at a load: users (concurrency), P95 TTFT, tokens/s each user (median request),
    the median queue wait in TTFT, and requests preempted (KV memory ran out)."""

    users: int
    ttft_p95_ms: float
    per_user_tok_s: float
    queue_ms: float = 0.0
    preemptions: int = 0


@dataclass(frozen=True)
class Targets:
    ttft_p95_ms: float
    per_user_tok_s: float

    def met(self, t: Trial) -> bool:
        return t.ttft_p95_ms <= self.ttft_p95_ms and t.per_user_tok_s >= self.per_user_tok_s


@dataclass(frozen=True)
class Load:
    """A load measured `repeats` times, judged on the median of its repeats."""

    users: int
    trials: tuple[Trial, ...]

    @property
    def median(self) -> Trial:
        med = lambda f: statistics.median(getattr(t, f) for t in self.trials)  # noqa: E731
        return Trial(self.users, med("ttft_p95_ms"), med("per_user_tok_s"), med("queue_ms"),
                     int(med("preemptions")))


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
        return cause(self.first_failing.median, self.targets) if self.first_failing else ""

    def verdict(self, hi: int) -> str:
        t = self.targets
        within = f"P95 TTFT <= {t.ttft_p95_ms:g} ms and >= {t.per_user_tok_s:g} tokens/s each"
        if self.users == 0:
            return (f"This machine holds no load tried at {within}: even "
                    f"{self.first_failing.users} user(s) missed them ({self.cause}).")
        if self.first_failing is None:
            return (f"This machine holds at least {self.users} users at {within}: the most "
                    f"this search tries ({hi}).")
        return f"This machine holds {self.users} users at {within}; past that, {self.cause}."


def cause(t: Trial, targets: Targets) -> str:
    """Why a load failed, in words, from what was measured at it."""
    if t.preemptions > 0:
        return (f"KV memory: {t.preemptions} request(s) were preempted for want of cache "
                "blocks and had to start again")
    if t.ttft_p95_ms > targets.ttft_p95_ms and t.queue_ms > QUEUE_SHARE * t.ttft_p95_ms:
        return (f"queueing: requests waited {t.queue_ms:.0f} ms (median) for a place in the "
                "batch before their first token")
    return ("compute: every step serves more users, so each user's tokens come slower "
            f"({t.per_user_tok_s:.0f} tokens/s each)")


def find_capacity(measure: Callable[[int], Trial], targets: Targets, *, lo: int = 1,
                  hi: int = 64, repeats: int = 3,
                  progress: Callable[[Load], None] | None = None) -> Capacity:
    """The most users in [lo, hi] whose median of `repeats` trials meets the targets (see the
    module doc); measure(users) runs one trial."""
    if not 1 <= lo <= hi:
        raise ValueError(f"the search needs 1 <= lo <= hi (got lo={lo}, hi={hi})")
    if repeats < 1:
        raise ValueError(f"each load needs at least one trial (got {repeats})")
    loads: dict[int, Load] = {}

    def passes(users: int) -> bool:
        if users not in loads:
            loads[users] = Load(users, tuple(measure(users) for _ in range(repeats)))
            if progress:
                progress(loads[users])
        return targets.met(loads[users].median)

    if not passes(lo):
        return Capacity(targets, 0, loads[lo], list(loads.values()))
    good, bad = lo, None
    while bad is None and good < hi:  # double until a load fails
        nxt = min(hi, good * 2)
        if passes(nxt):
            good = nxt
        else:
            bad = nxt
    while bad is not None and bad - good > 1:  # bisect to one user
        mid = (good + bad) // 2
        if passes(mid):
            good = mid
        else:
            bad = mid
    return Capacity(targets, good, loads[bad] if bad is not None else None,
                    sorted(loads.values(), key=lambda load: load.users))
