"""The capacity search on a synthetic server whose capacity is known: a closed loop of N users
on a server that batches up to B of them, each step taking a + b x batch ms, with seeded noise."""

import numpy as np
import pytest

from engine.calc.capacity import Targets, Trial, find_capacity


def server(max_batch=64, kv_users=1000, a=10.0, b=1.0, tokens=64, noise=0.03, seed=0):
    """measure(users) for a server of known shape: per-user tokens/s 1000 / step(min(N, B)),
    TTFT a prefill of two steps plus the wait for a place when N > B, preemptions past
    kv_users. Noise: each figure times (1 + normal(0, noise))."""
    rng = np.random.default_rng(seed)

    def measure(users: int) -> Trial:
        batch = min(users, max_batch)
        step = a + b * batch
        queue = max(0, users - max_batch) / max_batch * tokens * step
        jitter = lambda: 1 + rng.normal(0, noise)  # noqa: E731
        return Trial(users, (2 * step + queue) * jitter(), 1000 / step * jitter(), queue,
                     max(0, users - kv_users))
    return measure


def test_compute_bound_capacity_is_found_within_one_user_in_three_runs():
    # per user >= 24 tokens/s: step <= 41.7 ms: 31 users (32 give 23.8)
    targets = Targets(ttft_p95_ms=500, per_user_tok_s=24)
    found = [find_capacity(server(seed=s), targets, hi=64) for s in range(3)]
    assert all(abs(c.users - 31) <= 1 for c in found), [c.users for c in found]
    exact = find_capacity(server(noise=0), targets, hi=64)
    assert exact.users == 31 and exact.first_failing.users == 32
    assert exact.verdict(64) == ("This machine holds 31 users at P95 TTFT <= 500 ms and >= 24 "
                                 "tokens/s each; past that, compute: every step serves more "
                                 "users, so each user's tokens come slower (24 tokens/s each).")
    assert len(exact.loads) <= 2 * 6 + 1  # doubling then bisection, not every load


def test_queueing_bound_capacity_and_its_cause():
    # batch of 8: 9 users wait 1/8 of an answer (180 ms TTFT), 10 users 2/8 (324 ms)
    c = find_capacity(server(max_batch=8, noise=0), Targets(300, 10), hi=64)
    assert c.users == 9 and c.first_failing.users == 10 and "queueing" in c.cause
    assert [load.users for load in c.loads] == [1, 2, 4, 8, 9, 10, 12, 16]  # in users order


def test_kv_memory_cause_and_the_ends_of_the_range():
    c = find_capacity(server(kv_users=5, noise=0), Targets(5, 10), hi=64)  # TTFT 5 ms: none
    assert c.users == 0 and c.first_failing.users == 1
    assert c.verdict(64).startswith("This machine holds no load tried")
    kv = find_capacity(server(kv_users=5, noise=0), Targets(200, 40), hi=8)
    assert kv.first_failing is None and kv.users == 8  # 8 users pass; preempted but on target
    assert "at least 8 users" in kv.verdict(8)
    tight = find_capacity(server(kv_users=4, noise=0), Targets(50, 70), hi=64)
    assert tight.users == 4 and "KV memory" in tight.cause
    with pytest.raises(ValueError):
        find_capacity(server(), Targets(1, 1), lo=0)


def test_each_load_is_repeated_and_judged_on_its_median():
    calls = []

    def measure(users):
        calls.append(users)
        bad = calls.count(users) == 1 and users == 2  # the first trial at 2 users is slow
        return Trial(users, 1000.0 if bad else 10.0, 100.0 / users)
    c = find_capacity(measure, Targets(100, 10), hi=16, repeats=3)
    assert c.users == 10 and all(calls.count(u) == 3 for u in set(calls))
