"""The device's physical limits, measured by micro-benchmarks: memory read bandwidth and
matrix-multiply peak, and the read bandwidth of its last-level cache. The first two draw the
roofline that every decode and prefill step is compared against; the cache roof shows why a model
whose weights fit in that cache runs faster than the memory floor says. Measured once per machine (device name, torch version, threads) and cached,
but only when measured quietly: a peak measured while other work took the cores would sit under
every lesson's roofline from then on (see hardware_limits).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from .calc.step_cost import ridge_point
from .device import describe_device, synchronize
from .paths import cache_dir, write_json_atomic


@dataclass
class HardwareLimits:
    device: str
    memory_bandwidth_gbs: float  # read bandwidth, summing a large array (best of several)
    matmul_gflops: float  # dense square matmul in the engine's dtype on this device
    matmul_dtype: str
    threads: int
    measured_at: str  # ISO time of measurement
    # read bandwidth over a buffer that fits in the last-level cache, and that cache's size
    # (None where the OS does not say)
    cache_bandwidth_gbs: float | None = None
    llc_bytes: int | None = None
    check: dict | None = None  # the disturbance check, when measured now with one (not cached)

    @property
    def ridge_flop_per_byte(self) -> float:
        """Arithmetic intensity where compute, not memory, becomes the limit."""
        return ridge_point(self.memory_bandwidth_gbs, self.matmul_gflops)


def _best_seconds(fn, device: str, repeats: int) -> float:
    fn()
    synchronize(device)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        synchronize(device)
        best = min(best, time.perf_counter() - start)
    return best


def measure_bandwidth(device: str, nbytes: int = 2**30, repeats: int = 10) -> float:
    """GB/s reading nbytes of fp32 once (x.sum()); the array is filled so pages are real."""
    x = torch.ones(nbytes // 4, dtype=torch.float32, device=device)
    seconds = _best_seconds(lambda: x.sum(), device, repeats)
    return nbytes / seconds / 1e9


def last_level_cache_bytes(device: str = "cpu") -> int | None:
    """The size of the device's last-level cache: a GPU's L2, or the CPU's highest-level data
    or unified cache as Linux reports it in /sys; None where neither says."""
    if str(device).startswith("cuda"):
        return getattr(torch.cuda.get_device_properties(device), "L2_cache_size", None) or None
    best: tuple[int, int] | None = None
    for index in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*"):
        try:
            kind = (index / "type").read_text().strip()
            level = int((index / "level").read_text())
            size = parse_cache_size((index / "size").read_text())
        except (OSError, ValueError):
            continue
        if kind != "Instruction" and (best is None or level > best[0]):
            best = (level, size)
    return best[1] if best else None


def parse_cache_size(text: str) -> int:
    """Bytes in a /sys cache size such as "32768K" or "2M"."""
    text = text.strip().upper()
    scale = {"K": 2**10, "M": 2**20, "G": 2**30}.get(text[-1:], 1)
    return int(text.rstrip("KMG")) * scale


def measure_cache_bandwidth(device: str, llc_bytes: int | None, repeats: int = 10,
                            sums: int = 50) -> float:
    """GB/s reading a buffer of a quarter of the last-level cache (4 MiB when its size is
    unknown) again and again (x.sum(), as measure_bandwidth does over memory): after the
    first pass the buffer is read from the cache. Many sums per timing, so that each timing
    is long beside the clock's resolution."""
    nbytes = max(2**18, (llc_bytes or 2**24) // 4)
    x = torch.ones(nbytes // 4, dtype=torch.float32, device=device)

    def read():
        for _ in range(sums):
            x.sum()

    seconds = _best_seconds(read, device, repeats)
    return sums * nbytes / seconds / 1e9


def measure_matmul(device: str, size: int | None = None, repeats: int = 5):
    """GFLOP/s of a square matmul: fp32 on CPU (2048), bf16 on CUDA (8192)."""
    cuda = str(device).startswith("cuda")
    size = size or (8192 if cuda else 2048)
    dtype = torch.bfloat16 if cuda else torch.float32
    a = torch.randn(size, size, dtype=dtype, device=device)
    b = torch.randn(size, size, dtype=dtype, device=device)
    seconds = _best_seconds(lambda: a @ b, device, repeats)
    return 2 * size**3 / seconds / 1e9, str(dtype).removeprefix("torch.")


def _cache_file(device: str):
    key = f"{describe_device(device)}|torch {torch.__version__}|threads {torch.get_num_threads()}"
    safe = "".join(c if c.isalnum() else "_" for c in key)[:150]
    # "checked": files from before the disturbance check (maybe measured under load) are not read
    return cache_dir() / f"hardware-checked-{safe}.json"


def measure_limits(device: str) -> HardwareLimits:
    """Both limits, measured now (a few seconds)."""
    gflops, dtype = measure_matmul(device)
    llc = last_level_cache_bytes(device)
    return HardwareLimits(
        device=describe_device(device),
        memory_bandwidth_gbs=round(measure_bandwidth(device), 2),
        matmul_gflops=round(gflops, 1),
        matmul_dtype=dtype,
        threads=torch.get_num_threads(),
        measured_at=time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        cache_bandwidth_gbs=round(measure_cache_bandwidth(device, llc), 2),
        llc_bytes=llc,
    )


Checked = Callable[[Callable[[], HardwareLimits]], tuple[HardwareLimits, dict]]


def _read(path) -> HardwareLimits:
    """Limits kept on disk; ValueError for a file without the cache roof (kept before it was
    measured), which is then measured again."""
    limits = HardwareLimits(**json.loads(path.read_text()))
    if limits.cache_bandwidth_gbs is None:
        raise ValueError("no cache bandwidth")
    return limits


def limits_on_disk(device: str) -> bool:
    """Whether this device's limits are kept (readable), so hardware_limits measures nothing."""
    try:
        _read(_cache_file(device))
    except (OSError, ValueError, TypeError):
        return False
    return True


def hardware_limits(device: str, refresh: bool = False,
                    checked: Checked | None = None) -> HardwareLimits:
    """Cached limits of this device; measured (a few seconds) the first time or on refresh.

    checked (engine.lab.jobs.probe.measure_checked) runs the measurement inside the disturbance
    check every timed job gets. Limits it calls disturbed are returned with that check and not
    cached, so the next ask measures again: the roofline of every lesson is drawn from them, and
    a matmul peak measured beside other work would put every point too near its roof."""
    path = _cache_file(device)
    if path.exists() and not refresh:
        try:
            return _read(path)
        except (ValueError, TypeError):
            pass  # unreadable or from an older version: measure again
    if checked is None:
        limits = measure_limits(device)
    else:
        limits, check = checked(lambda: measure_limits(device))
        limits.check = check
        if check.get("disturbed"):
            return limits
    write_json_atomic(path, {k: v for k, v in asdict(limits).items() if k != "check"})
    return limits
