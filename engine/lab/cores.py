"""Which CPU cores the engine worker and the web process run on.

A measured step is only the engine's if nothing else runs on its cores: on a CPU host the worker
gets cores of its own (its torch threads = those cores) and the web process, which serializes
page updates for every reader, gets the others. On 2 cores that is 1 + 1 (bench/lab/core_split.py
compares it with letting both share the two cores). On a GPU host the engine needs the GPU and
a core or two to drive it; the web process gets the rest.

The split is set by the ENGINE_CORES environment variable (or the app's --engine-cores):
  auto (the default)  CPU: the web process gets ceil(n / 8) cores, the engine the rest;
                      GPU: the engine gets min(2, n - 1) cores, the web process the rest
  N                   the engine gets the last N cores, the web process the others
  2-7 or 1,3          the engine gets these cores, the web process the others
  off                 no pinning: both share every core (the numbers are then less trustworthy)
With one core there is nothing to split. A setting that does not fit this machine falls back to
auto, and the split's note says why (the about page shows it). Torch-free.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Iterable
from dataclasses import asdict, dataclass

from ..errors import ConfigError

log = logging.getLogger(__name__)

ENV = "ENGINE_CORES"
GPU_ENGINE_CORES = 2  # a GPU engine's Python loop and kernel launches; the rest go to the web


@dataclass(frozen=True)
class CoreSplit:
    """The engine's cores and the web process's (the same cores when nothing is split)."""

    engine: tuple[int, ...]
    web: tuple[int, ...]
    setting: str  # what asked for it: "auto", "1", "2-7", "off"
    note: str  # one line saying how it was decided, for the about page

    @property
    def isolated(self) -> bool:
        return not set(self.engine) & set(self.web)

    def to_dict(self) -> dict:
        return {**asdict(self), "engine": list(self.engine), "web": list(self.web),
                "isolated": self.isolated}

    @classmethod
    def from_dict(cls, data: dict) -> CoreSplit:
        return cls(tuple(data["engine"]), tuple(data["web"]), data["setting"], data["note"])


def parse_cores(text: str) -> tuple[int, ...]:
    """'2-4,7' -> (2, 3, 4, 7); ConfigError on anything else."""
    cores: set[int] = set()
    try:
        for part in text.split(","):
            lo, _, hi = part.strip().partition("-")
            first, last = int(lo), int(hi or lo)
            if first < 0 or last < first:
                raise ValueError
            cores.update(range(first, last + 1))
    except ValueError:
        raise ConfigError(f"{ENV} must be auto, off, a number of cores or a list such as 2-7 "
                          f"(got {text!r})") from None
    return tuple(sorted(cores))


def plan(available: Iterable[int], setting: str | None = "auto", gpu: bool = False) -> CoreSplit:
    """The split of the cores this process may use; never raises (a bad setting falls back to
    auto, and the note says so)."""
    cores = tuple(sorted(set(available)))
    setting = (setting or "auto").strip().lower()
    try:
        return _plan(cores, setting, gpu)
    except ConfigError as e:
        log.warning("%s; using %s=auto", e, ENV)
        split = _plan(cores, "auto", gpu)
        return CoreSplit(split.engine, split.web, setting, f"{e}; using auto: {split.note}")


def _plan(cores: tuple[int, ...], setting: str, gpu: bool) -> CoreSplit:
    n = len(cores)
    if setting == "off":
        return CoreSplit(cores, cores, setting, f"not split ({ENV}=off): the engine and the web "
                                                "server share every core")
    if n < 2:
        return CoreSplit(cores, cores, setting, "one core: the engine and the web server share it")
    if setting == "auto":
        count = min(GPU_ENGINE_CORES, n - 1) if gpu else n - math.ceil(n / 8)
        why = "GPU host: the engine needs a core or two to drive the GPU" if gpu else \
            "CPU host: the engine gets all but ceil(cores / 8) for the web server"
    elif setting.isdigit():
        count = int(setting)
        if not 1 <= count < n:
            raise ConfigError(f"{ENV}={setting} does not fit {n} cores: give the engine 1 to "
                              f"{n - 1} of them (or off)")
        why = f"{ENV}={setting}"
    else:
        engine = parse_cores(setting)
        missing = sorted(set(engine) - set(cores))
        if missing:
            raise ConfigError(f"{ENV}={setting} names core {missing[0]}, which this process may "
                              f"not use (it may use {_ranges(cores)})")
        if len(engine) == n:
            raise ConfigError(f"{ENV}={setting} leaves no core for the web server")
        web = tuple(c for c in cores if c not in engine)
        return CoreSplit(engine, web, setting, f"{ENV}={setting}")
    # the engine takes the last cores: the first usually also serves the most interrupts
    return CoreSplit(cores[n - count:], cores[:n - count], setting, why)


def _ranges(cores: Iterable[int]) -> str:
    return ",".join(str(c) for c in cores)


def describe(cores: Iterable[int]) -> str:
    """'core 1' / 'cores 0-3' / 'cores 0,2'."""
    cores = sorted(cores)
    if len(cores) == 1:
        return f"core {cores[0]}"
    if cores == list(range(cores[0], cores[-1] + 1)):
        return f"cores {cores[0]}-{cores[-1]}"
    return f"cores {_ranges(cores)}"


def available_cores() -> tuple[int, ...]:
    """The cores this process may run on now."""
    return tuple(sorted(os.sched_getaffinity(0)))


def pin(pid: int, cores: Iterable[int]) -> None:
    """Pin every thread of a process (0: this one) to cores. Linux keeps affinity per thread,
    and a thread inherits its creator's, so each existing thread is set; later ones follow."""
    cores = set(cores)
    pid = pid or os.getpid()
    try:
        threads = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        threads = [pid]
    for tid in threads:
        try:
            os.sched_setaffinity(tid, cores)
        except ProcessLookupError:
            pass  # a thread that has just exited
