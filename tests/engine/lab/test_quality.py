"""Measurement quality by definition: the spread of timed values, the disturbance check's rules
on given accounting, the core split, and the cache refusing untrustworthy results. (The check on
real jobs beside a busy loop, and the worker's affinity: test_isolation.py.)"""

from __future__ import annotations

import json
import statistics

import numpy as np
import pytest
from cache_entries import sweep_result

from engine.lab import cache, cores, quality
from engine.lab.cache import CacheStore
from engine.lab.results import DisturbanceCheck, Record, Spread

MS = 1_000_000  # ns


def usage(cpu_s: float, run_ms: float, wait_ms: float, busy_ticks: int = 0,
          steal_ticks: int = 0, wall: float = 0.0) -> quality.Usage:
    return quality.Usage(cores=(1,), wall=wall, cpu_s=cpu_s,
                         threads={7: (int(run_ms * MS), int(wait_ms * MS))},
                         ticks={1: (busy_ticks, steal_ticks)})


def test_spread_is_the_deciles_and_median_of_the_values():
    values = [float(v) for v in range(1, 101)]
    s = quality.spread(reversed(values), "decode step")
    deciles = statistics.quantiles(values, n=10, method="inclusive")
    assert s == {"what": "decode step", "count": 100, "p10": deciles[0], "p50": 50.5,
                 "p90": deciles[-1]}
    assert s["p10"] < s["p50"] < s["p90"]
    Spread.from_dict(s)  # the record's shape
    assert quality.spread([], "token gap") == {"what": "token gap", "count": 0, "p10": None,
                                               "p50": None, "p90": None}
    assert quality.spread([3.0], "x")["p10"] == quality.spread([3.0], "x")["p90"] == 3.0


def test_the_spread_of_a_few_values_stays_within_them():
    """statistics.quantiles' default (exclusive) method puts the p10 of 1, 2, 3 ms at 0.4 ms
    and the p90 at 3.6: faster and slower than any step timed. The spread's deciles are
    interpolated between the values (numpy's linear percentile)."""
    for values in ([1.0, 2.0, 3.0], [2.0, 2.1, 2.2, 2.3, 2.4], [5.0, 1.0], [7.0] * 4):
        s = quality.spread(values, "decode step")
        assert min(values) <= s["p10"] <= s["p50"] <= s["p90"] <= max(values)
        assert s["p10"] == pytest.approx(float(np.percentile(values, 10)))
        assert s["p90"] == pytest.approx(float(np.percentile(values, 90)))


def test_a_job_that_waited_for_its_core_beyond_the_limit_is_disturbed():
    before = usage(cpu_s=0.0, run_ms=0, wait_ms=0)
    after = usage(cpu_s=1.0, run_ms=1000, wait_ms=200, wall=1.2)
    check = quality.check(before, after)
    assert check["disturbed"] and "200 ms" in check["reasons"][0]
    assert check["wait_s"] == pytest.approx(0.2) and check["cpu_s"] == pytest.approx(1.0)
    DisturbanceCheck.from_dict(json.loads(json.dumps(check)))  # the record's shape, as JSON


def test_the_tests_assume_quiet_setting_counts_a_disturbed_job_as_quiet(monkeypatch):
    """LLM_SPEED_TEST_ASSUME_QUIET=1 (set only by the browser tests' served apps, which run two
    at a time): a wait and a slow probe beyond their limits count as quiet, their figures still
    reported; any other value changes nothing."""
    before, after = usage(0.0, 0, 0), usage(1.0, 1000, 200, wall=1.2)
    probe = quality.Probe(10.0, 16.0, profile_ms=10.0)
    monkeypatch.setenv(quality.ASSUME_QUIET_ENV, "0")
    assert len(quality.check(before, after, probe)["reasons"]) == 2
    monkeypatch.setenv(quality.ASSUME_QUIET_ENV, "1")
    check = quality.check(before, after, probe)
    assert not check["disturbed"] and check["reasons"] == []
    assert check["wait_s"] == pytest.approx(0.2) and check["probe_after_ms"] == 16.0


def test_a_pause_is_left_out_of_the_check():
    """A load test paused for other jobs (engine.lab.worker): their computing and their waits
    are not the load test's."""
    before, after = usage(0.0, 0, 0), usage(3.0, 3000, 240, busy_ticks=300, wall=4.0)
    pause = (usage(0.5, 500, 10, wall=0.5), usage(2.5, 2500, 230, busy_ticks=200, wall=2.8))
    whole, mine = quality.check(before, after), quality.check(before, after, paused=[pause])
    assert whole["disturbed"]  # 240 ms of 3 s, but 220 ms of it the pause's jobs waited
    assert not mine["disturbed"]  # its own: 20 ms of the 1 s it computed
    assert mine["cpu_s"] == pytest.approx(1.0) and mine["wait_s"] == pytest.approx(0.02)
    assert mine["wall_s"] == pytest.approx(1.7)
    waited = quality.check(before, usage(3.0, 3000, 290, wall=4.0), paused=[pause])
    assert waited["disturbed"] and waited["wait_s"] == pytest.approx(0.07)  # 7% of its 1 s


@pytest.mark.parametrize("wait_ms, disturbed", [
    (0, False),
    (40, False),  # 4% of the 1 s it computed
    (60, True),  # 6%
])
def test_the_wait_limit_is_relative_to_the_jobs_own_cpu_time(wait_ms, disturbed):
    check = quality.check(usage(0.0, 0, 0), usage(1.0, 1000, wait_ms))
    assert check["disturbed"] is disturbed


def test_a_tiny_wait_in_a_tiny_job_is_no_disturbance():
    # 1.5 ms of 10 ms is 15%, but under the 2 ms floor: one kernel thread's wake-up
    assert not quality.check(usage(0.0, 0, 0), usage(0.010, 10, 1.5))["disturbed"]
    assert quality.check(usage(0.0, 0, 0), usage(0.010, 10, 3))["disturbed"]


def test_steal_counts_as_time_taken_from_the_job():
    ticks = round(0.1 / quality.TICK_S)  # 100 ms stolen by the hypervisor
    check = quality.check(usage(0.0, 0, 0), usage(1.0, 1000, 0, busy_ticks=ticks,
                                                    steal_ticks=ticks))
    assert check["disturbed"] and "hypervisor" in check["reasons"][0]


def test_other_processes_cpu_on_the_cores_is_reported():
    ticks = round(1.5 / quality.TICK_S)  # the core was busy 1.5 s; the job used 1.0 s of it
    check = quality.check(usage(0.0, 0, 0), usage(1.0, 1000, 0, busy_ticks=ticks))
    assert check["others_cpu_s"] == pytest.approx(0.5, abs=2 * quality.TICK_S)


@pytest.mark.parametrize("before_ms, after_ms, disturbed", [
    (10.0, 10.5, False),
    (10.0, 14.9, False),
    (15.5, 10.0, True),  # slower than the profile by more than the limit, before the job
    (10.0, 16.0, True),  # ... after it
])
def test_a_slow_calibration_probe_marks_the_job_disturbed(before_ms, after_ms, disturbed):
    probe = quality.Probe(before_ms, after_ms, profile_ms=10.0)
    check = quality.check(usage(0.0, 0, 0), usage(1.0, 1000, 0), probe)
    assert check["disturbed"] is disturbed
    assert check["probe_profile_ms"] == 10.0 and check["probe_limit"] == quality.PROBE_LIMIT
    if disturbed:
        assert "calibration probe" in check["reasons"][0]


def test_the_accounting_of_this_process_is_readable():
    threads = quality.thread_times()
    assert threads and all(run >= 0 and wait >= 0 for run, wait in threads.values())
    ticks = quality.core_ticks()
    assert set(cores.available_cores()) <= set(ticks)
    assert quality.process_cpu_s(quality.os.getpid()) >= 0


# ---- the core split ---------------------------------------------------------------------------
@pytest.mark.parametrize("n, engine, web", [
    (2, (1,), (0,)),
    (4, (1, 2, 3), (0,)),
    (8, tuple(range(1, 8)), (0,)),
    (16, tuple(range(2, 16)), (0, 1)),
])
def test_on_a_cpu_host_the_engine_gets_cores_of_its_own(n, engine, web):
    split = cores.plan(range(n))
    assert (split.engine, split.web) == (engine, web) and split.isolated


def test_on_a_gpu_host_the_engine_keeps_a_core_or_two():
    assert cores.plan(range(8), gpu=True).engine == (6, 7)
    assert cores.plan(range(2), gpu=True).engine == (1,)


@pytest.mark.parametrize("setting, engine, web", [
    ("1", (3,), (0, 1, 2)),
    ("2", (2, 3), (0, 1)),
    ("1-2", (1, 2), (0, 3)),
    ("0,3", (0, 3), (1, 2)),
    ("off", (0, 1, 2, 3), (0, 1, 2, 3)),
])
def test_the_split_is_configurable(setting, engine, web):
    split = cores.plan(range(4), setting)
    assert (split.engine, split.web, split.setting) == (engine, web, setting)


@pytest.mark.parametrize("setting, words", [
    ("4", "does not fit 4 cores"),
    ("0-3", "leaves no core for the web server"),
    ("9", "does not fit"),
    ("5-6", "names core 5"),
    ("two", "must be auto, off"),
])
def test_a_setting_that_does_not_fit_falls_back_to_auto_and_says_why(setting, words):
    split = cores.plan(range(4), setting)
    assert (split.engine, split.web) == ((1, 2, 3), (0,))
    assert words in split.note and "using auto" in split.note


def test_one_core_is_shared():
    split = cores.plan([0])
    assert split.engine == split.web == (0,) and not split.isolated
    assert "share" in split.note


# ---- the cache keeps only trustworthy results ------------------------------------------------------
def result(disturbed: bool | None) -> dict:
    """A well-formed sweep_point result (the cache reads entries as typed records) with a check."""
    check = None if disturbed is None else {
        "disturbed": disturbed, "reasons": [], "cores": [1], "wall_s": 1.0, "cpu_s": 1.0,
        "wait_s": 0.0, "steal_s": 0.0, "others_cpu_s": 0.0, "probe_before_ms": 8.0,
        "probe_after_ms": 8.0, "probe_profile_ms": 8.0, "wait_limit": 0.05, "probe_limit": 1.5}
    return {**sweep_result(), "check": check}


KEY = CacheStore.key("cpu: test", "0", "sweep_point", {"batch_size": 1})


def test_the_cache_refuses_a_disturbed_result(tmp_path):
    store = CacheStore(tmp_path)
    assert store.put(KEY, result(disturbed=True), "now") is False
    assert store.get(KEY) is None and len(store) == 0 and not list(tmp_path.iterdir())
    assert store.put(KEY, result(disturbed=False), "now") is True
    assert store.get(KEY)["result"]["check"]["disturbed"] is False
    assert CacheStore(tmp_path).get(KEY)["result"] == result(disturbed=False)  # from disk


def test_the_cache_keeps_an_untimed_result_and_refuses_one_without_a_check(tmp_path):
    store = CacheStore(tmp_path)
    assert store.put(KEY, result(disturbed=None), "now")  # check None: nothing was timed
    old = {"tpot_ms": 2.0}  # measured before results carried a check
    key = {**KEY, "params": {"batch_size": 2}}
    assert store.put(key, old, "now") is False and store.get(key) is None


def test_the_cache_never_serves_a_disturbed_entry_found_on_disk(tmp_path):
    store = CacheStore(tmp_path)
    store.put(KEY, result(disturbed=False), "now")
    [path] = tmp_path.iterdir()
    record = json.loads(path.read_text())
    record["result"]["check"]["disturbed"] = True  # planted by hand, or an older writer
    path.write_text(json.dumps(record))
    assert CacheStore(tmp_path).get(KEY) is None


def test_a_kind_whose_record_carries_no_check_is_kept_without_one(monkeypatch):
    """A job kind added with a plain Record (no spread, no check: the worker adds none) is
    cached as before; a Measured kind's result without a check is not (measured before checks)."""
    monkeypatch.setitem(cache.RESULTS, "plain_kind", Record)
    assert cache.trustworthy({"x": 1}, "plain_kind")
    assert not cache.trustworthy({"x": 1, "check": {"disturbed": True}}, "plain_kind")
    assert not cache.trustworthy({"tpot_ms": 2.0}, "sweep_point")
