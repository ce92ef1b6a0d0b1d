"""The calibration probe: a short, fixed piece of work timed just before and just after every
timed job, and this machine's profile to compare it with (engine.lab.quality decides).

The probe does what a decode step does, in small: a few rows multiplied by a weight matrix
(compute and cache) and a sweep over an array larger than the last-level cache (memory
bandwidth), each rep about 5 ms on one core of the development machine; its figure is the
median of REPS reps. The profile is the 10th percentile of the last HISTORY probe figures seen
for this device, torch version and thread count, kept beside the hardware limits
(engine.paths.cache_dir): a quiet machine comes back to it, a busy one cannot. (Not the fastest
ever: the minimum of thousands of noisy figures keeps falling, and would call a quiet machine
busy.)
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable, Iterable
from typing import TypeVar

import torch

from ...device import describe_device
from ...paths import cache_dir, write_json_atomic
from .. import cores, quality, trace

T = TypeVar("T")

REPS = 5
ROWS, WIDTH = 64, 1024  # a (ROWS x WIDTH) @ (WIDTH x WIDTH) fp32 product: 4 MiB of weights
SWEEP_BYTES = 64 * 2**20  # twice a 32 MiB last-level cache: the sweep reads from memory
FIRST_PROBES = 5  # a new machine's profile starts from these
HISTORY = 100  # the profile is a low percentile of this many recent figures
FRESH_S = 0.25  # a probe this recent is the next job's before-probe


class Probe:
    """The probe's tensors (built once per worker) and the machine's profile."""

    def __init__(self):
        gen = torch.Generator().manual_seed(0)
        self.x = torch.randn(ROWS, WIDTH, generator=gen)
        self.w = torch.randn(WIDTH, WIDTH, generator=gen)
        self.sweep = torch.ones(SWEEP_BYTES // 4)
        self.path = cache_dir() / f"probe-{_machine_key()}.json"
        self.last: tuple[float, float] | None = None  # (ms, time.monotonic() when it ended)
        self.figures = self._load()
        if not self.figures:
            self.figures = [self.measure(keep=False) for _ in range(FIRST_PROBES)]
            self._save()

    @property
    def profile_ms(self) -> float:
        """This machine's probe figure when quiet: the 10th percentile of recent figures."""
        if len(self.figures) < 10:
            return min(self.figures)
        return statistics.quantiles(self.figures, n=10)[0]

    def _once(self) -> float:
        start = time.perf_counter()
        torch.mm(self.x, self.w)
        self.sweep.sum()
        return 1000 * (time.perf_counter() - start)

    def measure(self, keep: bool = True) -> float:
        """The probe's figure now: the median of REPS reps (ms), after one unrecorded rep;
        kept in the history the profile is taken from."""
        self._once()
        ms = statistics.median(self._once() for _ in range(REPS))
        if keep:
            self.figures = [*self.figures, ms][-HISTORY:]
            self._save()
            self.last = (ms, time.monotonic())
        return ms

    def measure_before(self) -> float:
        """The figure just before a job: the last probe's if it ended within FRESH_S (the
        previous job's after-probe), else a new one."""
        if self.last is not None and time.monotonic() - self.last[1] <= FRESH_S:
            return self.last[0]
        return self.measure()

    def _load(self) -> list[float]:
        try:
            figures = json.loads(self.path.read_text())["figures"]
        except (OSError, ValueError, KeyError, TypeError):
            return []
        if not isinstance(figures, list):
            return []
        return [float(f) for f in figures if isinstance(f, (int, float)) and f > 0][-HISTORY:]

    def _save(self) -> None:
        try:
            write_json_atomic(self.path, {"figures": self.figures,
                                          "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S%z")})
        except OSError:
            pass  # the profile is then this worker's alone


def _machine_key() -> str:
    key = f"{describe_device('cpu')}|torch {torch.__version__}|threads {torch.get_num_threads()}"
    return "".join(c if c.isalnum() else "_" for c in key)[:150]


_probe: Probe | None = None


def measure_checked(measure: Callable[[], T],
                    paused: Iterable[tuple[quality.Usage, quality.Usage]] = ()) -> tuple[T, dict]:
    """measure() inside the disturbance check every timed job gets (engine.lab.quality.check):
    the calibration probe just before and just after, the accounting of the engine's cores
    around it, less `paused` (the snapshots around the job's pauses, engine.lab.worker: read
    once measure() has returned). Returns what measure returned and the check."""
    probe = get_probe()
    before_ms = probe.measure_before()
    trace.mark("probe0")
    start = quality.Usage.now(cores.available_cores())
    value = measure()
    end = quality.Usage.now(start.cores)
    trace.mark("body")
    after_ms = probe.measure()
    trace.mark("probe1")
    return value, quality.check(start, end, quality.Probe(before_ms, after_ms, probe.profile_ms),
                                paused)


def get_probe() -> Probe:
    """This process's probe (built on first use: a few probes the first time on a machine)."""
    global _probe
    if _probe is None or _probe.path.parent != cache_dir():
        _probe = Probe()
    return _probe
