"""Who used the CPU during a bench, second by second, from Linux's /proc (standard library only).

bench/lab/classroom.py runs the web server, its engine worker, the students (Bokeh client sessions,
threads of the bench's own process) and Chromium on one 2-core machine, the last three on the web
server's core (keep_off_engine_cores). A slow page there may be the server's own work or the
load generator's: this samples each process group's CPU seconds (utime + stime) and each core's
busy share once a second, so the report can say which.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

from bench.web.served_app import child_pids

TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int | None) -> float:
    """A process's CPU time so far (user + system, every thread), in seconds; 0 if it is gone."""
    if pid is None:
        return 0.0
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0.0
    fields = stat.rsplit(")", 1)[1].split()  # after "pid (comm)": state is fields[0]
    return (int(fields[11]) + int(fields[12])) / TICK  # utime, stime (stat fields 14, 15)


def descendants(pid: int) -> list[int]:
    """Every process below `pid` (children, theirs, ...)."""
    found, todo = [], [pid]
    while todo:
        kids = child_pids(todo.pop())
        found += kids
        todo += kids
    return found


def lowest_priority_sessions(pids: list[int]) -> list[str]:
    """Nice 19 for the scheduler's autogroup of each process in a session other than this
    one; the autogroups set. With autogroups on (/proc/sys/kernel/sched_autogroup_enabled, the
    default of most Linux kernels), a process's niceness orders it only within its session's
    group, and the groups share a core as equals: Playwright starts Chromium in sessions of
    its own (setsid), so Chromium at nice 19 still takes up to half the web server's core
    whenever it wants. A group's
    own nice weighs it against the other groups; processes forked later (Chromium's renderers)
    join their parent's group. Processes of this session (the server, its worker, the
    students) are left alone."""
    mine, done = os.getsid(0), []
    for pid in pids:
        try:
            if os.getsid(pid) == mine:
                continue
            path = Path(f"/proc/{pid}/autogroup")
            group = path.read_text().split()[0]  # "/autogroup-68 nice 0"
            if group not in done:
                path.write_text("19")
                done.append(group)
        except (OSError, IndexError):  # gone, or no autogroups on this kernel
            continue
    return done


def core_busy() -> dict[int, tuple[float, float]]:
    """Each core's (busy, total) jiffies since boot (/proc/stat; idle and iowait are not busy)."""
    cores = {}
    for line in Path("/proc/stat").read_text().splitlines():
        if line.startswith("cpu") and line[3].isdigit():
            name, *values = line.split()
            values = [int(v) for v in values]
            idle = values[3] + values[4]
            cores[int(name[3:])] = (sum(values) - idle, sum(values))
    return cores


class CpuSampler:
    """Once a second, the CPU seconds each group used since the last sample and each core's busy
    share over that interval.

    groups: name -> a function giving that group's pids now (a process's children come and go:
    Chromium's renderers, a restarted worker). A process that exits between two samples loses its
    last partial second (it is gone from /proc), so the figures err low, never high."""

    def __init__(self, groups: dict, start: float, period_s: float = 1.0):
        self.groups = groups
        self.t0 = start
        self.period_s = period_s
        self.samples: list[dict] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="cpu-sampler")

    def start(self) -> CpuSampler:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)

    def _totals(self) -> dict[str, dict[int, float]]:
        return {name: {pid: cpu_seconds(pid) for pid in pids()} for name, pids in
                self.groups.items()}

    def _run(self) -> None:
        last, last_cores, last_t = self._totals(), core_busy(), time.monotonic()
        while not self._stop.wait(self.period_s):
            now, cores, t = self._totals(), core_busy(), time.monotonic()
            # dt_s: the sampler itself may be kept waiting (the bench runs at nice 19), so a
            # sample can cover more than a period; shares are taken over the real interval
            sample = {"t_s": round(t - self.t0, 1), "dt_s": round(t - last_t, 2)}
            for name, pids in now.items():  # a new pid counts from 0: its whole life so far
                used = sum(t - last[name].get(pid, 0.0) for pid, t in pids.items())
                sample[name] = round(max(used, 0.0), 2)
            for core, (busy, total) in cores.items():
                b0, t0 = last_cores.get(core, (busy, total))
                sample[f"core{core}"] = round((busy - b0) / (total - t0), 2) if total > t0 else None
            self.samples.append(sample)
            last, last_cores, last_t = now, cores, t


def windows(samples: list[dict], names: list[str], every_s: float, until_s: float) -> list[dict]:
    """Each group's share of one core (CPU seconds over the seconds the samples cover) and each
    core's busy share, over windows of every_s seconds (by when each sample was taken), up to
    until_s seconds."""
    out = []
    t = 0.0
    while t < until_s:
        inside = [s for s in samples if t < s["t_s"] <= t + every_s]
        if inside:
            covered = sum(s["dt_s"] for s in inside)
            row = {"from_s": t, "to_s": t + every_s, "covered_s": round(covered, 1)}
            for name in names:
                if name.startswith("core"):  # weighted by the interval each sample covers
                    pairs = [(s[name], s["dt_s"]) for s in inside if s.get(name) is not None]
                    span = sum(dt for _, dt in pairs)
                    row[name] = round(sum(v * dt for v, dt in pairs) / span, 2) if span else None
                else:
                    row[name] = round(sum(s.get(name, 0.0) for s in inside) / covered, 2)
            out.append(row)
        t += every_s
    return out
