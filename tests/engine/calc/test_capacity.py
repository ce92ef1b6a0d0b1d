"""The capacity search on a synthetic server whose capacity is known: a closed loop of N users
on a server that batches up to B of them, each step taking a + b x batch ms, with seeded noise
on every request and on each run's own speed."""

import numpy as np
import pytest

from engine.calc.capacity import Trial, find_capacity, grid
from engine.calc.slo_math import Targets

EVERY_USER = 64  # loads per doubling that make the grid every whole number up to 64


def server(max_batch=64, kv_users=1000, a=10.0, b=1.0, tokens=64, noise=0.03, per_user=2,
           seed=0):
    """measure(users) for a server of known shape: every request's TPOT is one step,
    step(min(N, B)); its TTFT a prefill of two steps plus the wait for a place when N > B;
    preemptions past kv_users. Noise: each run's speed times (1 + normal(0, noise)), and each
    request's figures times (1 + normal(0, noise)) again."""
    rng = np.random.default_rng(seed)

    def measure(users: int) -> Trial:
        batch = min(users, max_batch)
        step = a + b * batch
        queue = max(0, users - max_batch) / max_batch * tokens * step
        n = users * per_user
        run = 1 + rng.normal(0, noise)

        def jitter():
            return run * (1 + rng.normal(0, noise, n))
        return Trial(users, tuple((2 * step + queue) * jitter()), tuple(step * jitter()),
                     (queue,) * n, max(0, users - kv_users))
    return measure


def test_the_grid_is_the_searchs_resolution():
    assert grid(1, 32) == [1, 2, 3, 4, 5, 6, 7, 8, 10, 11, 13, 16, 19, 23, 27, 32]
    assert grid(1, 64, EVERY_USER) == list(range(1, 65))
    assert grid(3, 20) == [3, 4, 5, 6, 7, 8, 10, 11, 13, 16, 19, 20]


def test_compute_bound_capacity_is_found_at_the_same_load_in_three_noisy_runs():
    # per user >= 25.3 tokens/s: step <= 39.5 ms: 29 users (30 give 25.0); 27 and 32 users,
    # the grid's loads either side, pass and fail by 6%, well beyond the 3% noise
    targets = Targets.per_user(500, 25.3)
    exact = find_capacity(server(noise=0), targets, hi=64, per_doubling=EVERY_USER)
    assert exact.users == 29 and exact.first_failing.users == 30
    assert len(exact.loads) <= 2 * 7 + 1  # doubling then bisection, not every load
    found = [find_capacity(server(seed=s), targets, hi=64) for s in range(3)]
    assert [c.users for c in found] == [27, 27, 27]  # the grid's load at or below 29
    assert all(c.first_failing.users == 32 for c in found)
    assert found[0].verdict(64).startswith(
        "This machine holds 27 users at P95 TTFT <= 500 ms and >= 25.3 tokens/s each; past "
        "that (32 users, the search's next step), compute: every step serves more users, so "
        "each user's tokens come slower (")


def test_queueing_bound_capacity_and_its_cause():
    # batch of 8: 9 users wait 1/8 of an answer (180 ms TTFT), 10 users 2/8 (324 ms)
    c = find_capacity(server(max_batch=8, noise=0), Targets.per_user(300, 10), hi=64,
                      per_doubling=EVERY_USER)
    assert c.users == 9 and c.first_failing.users == 10 and "queueing" in c.cause
    assert [load.users for load in c.loads] == [1, 2, 4, 8, 9, 10, 12, 16]  # in users order
    assert all(len(load.trials) == 1 for load in c.loads)  # noise-free: each decided at once


def test_kv_memory_cause_and_the_ends_of_the_range():
    # TTFT 5 ms: no load meets it
    c = find_capacity(server(kv_users=5, noise=0), Targets.per_user(5, 10), hi=64)
    assert c.users == 0 and c.first_failing.users == 1
    assert c.verdict(64).startswith("This machine holds no load tried")
    kv = find_capacity(server(kv_users=5, noise=0), Targets.per_user(200, 40), hi=8)
    assert kv.first_failing is None and kv.users == 8  # 8 users pass; preempted but on target
    assert "at least 8 users" in kv.verdict(8)
    tight = find_capacity(server(kv_users=4, noise=0), Targets.per_user(50, 70), hi=64)
    assert tight.users == 4 and "KV memory" in tight.cause
    with pytest.raises(ValueError):
        find_capacity(server(), Targets.per_user(1, 1), lo=0)


def test_a_load_whose_interval_straddles_a_target_is_measured_again_up_to_repeats():
    calls = []

    def measure(users):
        calls.append(users)
        # 40 TTFTs spread evenly up to a P95 of 98 ms at 4 users (the target is 100 ms)
        return Trial(users, tuple(np.linspace(0, 98 / 0.95, 40) * users / 4), (10.0,) * 40)
    c = find_capacity(measure, Targets.per_user(100, 10), hi=16, repeats=3)
    assert calls == [1, 2, 4, 4, 4, 8, 6, 5] and c.users == 4
    load = c.loads[2]  # 4 users: its interval straddles 100 ms after each trial
    assert load.ttft.n == 120 and load.ttft.lo < 100 < load.ttft.hi  # pooled, 3 trials
    assert load.met(Targets.per_user(100, 10))  # judged on the pooled P95, 98 ms
