"""How good a measurement is: the spread of what it timed, and whether it was disturbed.

Every timed job's result carries both (engine.lab.results: Spread, DisturbanceCheck):

- the spread: p10, p50 and p90 of the times it measured (decode steps, prefill passes, engine
  steps, token gaps), so a chart can draw whiskers and a reader can see how steady it was;
- the disturbance check, read from Linux's own accounting around the job:
  * how long the job's threads were ready to run but waited for a core
    (/proc/self/task/*/schedstat: run_delay), plus the time the hypervisor took from the
    engine's cores (steal, /proc/stat). This is exactly the time other work took from the
    job while it measured, wherever that work came from. DISTURBED when it is more than
    WAIT_LIMIT (5%) of the job's own CPU time and more than MIN_WAIT_S (2 ms): then a median
    step may be off by a few percent and a worst gap (lesson 7) by the whole wait, while the
    figures the lessons compare differ by 1.25x or more. A short job (1 ms steps) gets the 2 ms
    floor: one kernel thread's wake-up is not a disturbance.
  * the CPU time other processes used on the engine's cores (/proc/stat per core, less the
    worker's own), reported beside it;
  * a calibration probe run just before and just after the job (engine.lab.jobs.probe: a fixed
    matrix multiply and memory sweep, the median of 5 reps), compared with this machine's
    profile (the 10th percentile of its last 100 probe figures). DISTURBED when either is
    slower than the profile by more than PROBE_LIMIT, 1.5x. On a 2-core VM the quiet probe
    itself varies by up to about 1.45x its 10th percentile (its neighbours share the host's
    memory), a hog on the other core stays inside that, and a busy loop on the engine's own core
    is about twice the profile: only that case is beyond 1.5x. So the probe is a second line
    behind the wait above, for slowdowns that no counter in the VM sees (a host that throttles
    it), not a detector of a memory hog on the other core (the job's own spread shows that).
A disturbed result is labelled so, never cached (engine.lab.cache), and the service measures it
again once the engine's cores are quiet (engine.lab.dispatcher, wait_until_quiet). Torch-free:
reads /proc only.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from ..calc.stats import deciles

WAIT_LIMIT = 0.05  # waited for a core more than 5% of the job's own CPU time: disturbed
MIN_WAIT_S = 0.002  # ... and more than 2 ms in all
PROBE_LIMIT = 1.5  # a probe 1.5x slower than the machine's profile: disturbed
QUIET_SHARE = 0.05  # the engine's cores are quiet when others use under 5% of them
QUIET_WINDOW_S = 0.5  # ... over half a second
TICK_S = 1.0 / os.sysconf("SC_CLK_TCK")  # /proc/stat's unit
# A test-only setting: the browser tests serve two apps at once (one per pytest-xdist worker), and
# each app's engine shares the machine with the other's, so every job would come back disturbed,
# be measured again after waits for quiet cores, and go uncached. With ASSUME_QUIET_ENV=1 in the
# worker's environment every check counts as quiet (its figures are still reported), so what a
# page shows (a result cached for a reload, no re-measure) does not depend on the other app's
# load. Never set by the app or the engine.
ASSUME_QUIET_ENV = "LLM_SPEED_TEST_ASSUME_QUIET"


def spread(values_ms: Iterable[float], what: str) -> dict:
    """p10, p50 and p90 of timed values (ms): the record engine.lab.results.Spread. Deciles as
    engine.sweep computes them (engine.calc.stats.deciles: within the data); None when empty."""
    values = sorted(float(v) for v in values_ms)
    if not values:
        return {"what": what, "count": 0, "p10": None, "p50": None, "p90": None}
    cuts = deciles(values)
    return {"what": what, "count": len(values), "p10": cuts[0],
            "p50": statistics.median(values), "p90": cuts[-1]}


# ---- reading Linux's accounting ---------------------------------------------------------------
def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def thread_times(pid: int | None = None) -> dict[int, tuple[int, int]]:
    """Each thread of a process (default: this one): (ns on a CPU, ns ready but waiting)."""
    pid = pid or os.getpid()
    times = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return times
    for tid in tids:
        text = _read(f"/proc/{pid}/task/{tid}/schedstat")
        if text:
            run, wait, *_ = text.split()
            times[int(tid)] = (int(run), int(wait))
    return times


def core_ticks(cores: Iterable[int] | None = None) -> dict[int, tuple[int, int]]:
    """Each core's (busy ticks, steal ticks) from /proc/stat; busy counts everything but idle
    and iowait (steal included: the hypervisor's time is time the core was not ours)."""
    wanted = None if cores is None else set(cores)
    ticks = {}
    for line in (_read("/proc/stat") or "").splitlines():
        if not line.startswith("cpu") or line.startswith("cpu "):
            continue
        name, *values = line.split()
        core = int(name[3:])
        if wanted is not None and core not in wanted:
            continue
        v = [int(x) for x in values] + [0] * 8
        user, nice, system, idle, iowait, irq, softirq, steal = v[:8]
        ticks[core] = (user + nice + system + irq + softirq + steal, steal)
    return ticks


def process_cpu_s(pid: int) -> float | None:
    """A process's CPU time (user + system, all threads) from /proc/<pid>/stat."""
    text = _read(f"/proc/{pid}/stat")
    if not text:
        return None
    fields = text[text.rindex(")") + 2:].split()  # after "pid (name) "
    return (int(fields[11]) + int(fields[12])) * TICK_S  # utime, stime


@dataclass
class Usage:
    """A snapshot of the accounting around a job."""

    cores: tuple[int, ...]
    wall: float = field(default_factory=time.monotonic)
    cpu_s: float = field(default_factory=time.process_time)
    threads: dict[int, tuple[int, int]] = field(default_factory=thread_times)
    ticks: dict[int, tuple[int, int]] = field(default_factory=dict)

    @classmethod
    def now(cls, cores: Iterable[int]) -> Usage:
        cores = tuple(sorted(cores))
        return cls(cores, ticks=core_ticks(cores))


@dataclass(frozen=True)
class Probe:
    """The calibration probe: ms before and after the job, and this machine's profile (its
    figure when quiet)."""

    before_ms: float
    after_ms: float
    profile_ms: float


def _between(before: Usage, after: Usage) -> tuple[float, int, int, int, int, float]:
    """(wall s, run ns, wait ns, busy ticks, steal ticks, process CPU s) between snapshots."""
    run_ns = wait_ns = 0
    for tid, (run, wait) in after.threads.items():
        run0, wait0 = before.threads.get(tid, (0, 0))  # a thread started meanwhile: from 0
        run_ns += max(0, run - run0)
        wait_ns += max(0, wait - wait0)
    busy = sum(after.ticks[c][0] - before.ticks.get(c, (0, 0))[0] for c in after.ticks)
    steal = sum(after.ticks[c][1] - before.ticks.get(c, (0, 0))[1] for c in after.ticks)
    return after.wall - before.wall, run_ns, wait_ns, busy, steal, after.cpu_s - before.cpu_s


def check(before: Usage, after: Usage, probe: Probe | None = None,
          paused: Iterable[tuple[Usage, Usage]] = ()) -> dict:
    """The disturbance check of a job between two snapshots (engine.lab.results.
    DisturbanceCheck), less the `paused` windows (snapshots around each pause, when the
    worker ran other jobs inside this one: their work is not this job's). See the module
    docstring for the rules."""
    wall, run_ns, wait_ns, busy, steal, process_s = _between(before, after)
    for start, end in paused:
        gone = _between(start, end)
        wall, run_ns, wait_ns = wall - gone[0], run_ns - gone[1], wait_ns - gone[2]
        busy, steal, process_s = busy - gone[3], steal - gone[4], process_s - gone[5]
    run_ns, wait_ns, busy, steal = (max(0, x) for x in (run_ns, wait_ns, busy, steal))
    cpu_s = max(process_s, run_ns / 1e9)
    wait_s, steal_s = wait_ns / 1e9, steal * TICK_S
    others_s = max(0.0, busy * TICK_S - cpu_s)
    reasons = []
    lost = wait_s + steal_s
    if lost > MIN_WAIT_S and lost > WAIT_LIMIT * cpu_s:
        who = "other work" if not steal_s else "other work and the hypervisor"
        reasons.append(f"{who} kept the engine off its core for {1000 * lost:.0f} ms, "
                       f"{lost / max(cpu_s, 1e-9):.0%} of the {1000 * cpu_s:.0f} ms it computed "
                       f"(limit {WAIT_LIMIT:.0%})")
    if probe is not None:
        slowest = max(probe.before_ms, probe.after_ms)
        if slowest > PROBE_LIMIT * probe.profile_ms:
            when = "before" if probe.before_ms >= probe.after_ms else "after"
            reasons.append(f"the calibration probe {when} the job took {slowest:.1f} ms, "
                           f"{slowest / probe.profile_ms:.2f}x this machine's "
                           f"{probe.profile_ms:.1f} ms (limit {PROBE_LIMIT:g}x)")
    if os.environ.get(ASSUME_QUIET_ENV) == "1":
        reasons = []  # tests only: see ASSUME_QUIET_ENV
    return {
        "disturbed": bool(reasons), "reasons": reasons, "cores": list(after.cores),
        "wall_s": wall, "cpu_s": cpu_s, "wait_s": wait_s,
        "steal_s": steal_s, "others_cpu_s": others_s,
        "probe_before_ms": probe.before_ms if probe else None,
        "probe_after_ms": probe.after_ms if probe else None,
        "probe_profile_ms": probe.profile_ms if probe else None,
        "wait_limit": WAIT_LIMIT, "probe_limit": PROBE_LIMIT,
    }


# ---- waiting for quiet cores ------------------------------------------------------------------------
def others_share(cores: Iterable[int], own_pid: int | None = None,
                 window_s: float = QUIET_WINDOW_S) -> float:
    """The CPU that processes other than own_pid (default: this one) used on `cores` over
    window_s, as a share of those cores (1.0: all of them busy all the time)."""
    cores, pid = tuple(cores), own_pid or os.getpid()
    before, own_before = core_ticks(cores), process_cpu_s(pid) or 0.0
    start = time.monotonic()
    time.sleep(window_s)
    after, own_after = core_ticks(cores), process_cpu_s(pid) or 0.0
    elapsed = time.monotonic() - start
    busy = sum(after[c][0] - before.get(c, (0, 0))[0] for c in after) * TICK_S
    return max(0.0, busy - (own_after - own_before)) / (elapsed * max(1, len(cores)))


def wait_until_quiet(cores: Iterable[int], timeout_s: float,
                     on_wait: Callable[[float, float], None] | None = None,
                     stop: Callable[[], bool] | None = None) -> tuple[bool, float]:
    """Sample the engine's cores until other processes use under QUIET_SHARE of them over a
    window, or timeout_s passes, or stop() is true; on_wait(seconds waited, share) after each
    busy window. Returns (quiet, the last share). Only the engine's cores count: what runs on
    the web's cores (the web server, a browser on the same machine) cannot take the engine's
    time, and what slows it through memory the calibration probe of the next run shows."""
    cores = tuple(cores)
    deadline = time.monotonic() + timeout_s
    start = time.monotonic()
    while True:
        share = others_share(cores)
        if share < QUIET_SHARE:
            return True, share
        if time.monotonic() >= deadline or (stop is not None and stop()):
            return False, share
        if on_wait:
            on_wait(time.monotonic() - start, share)
