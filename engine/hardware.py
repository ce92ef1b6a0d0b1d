"""The device's two physical limits, measured by micro-benchmarks: memory read bandwidth and
matrix-multiply peak. Together they draw the roofline that every decode and prefill step is
compared against. Measured once per machine (device name, torch version, threads) and cached.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass

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
    return cache_dir() / f"hardware-{safe}.json"


def hardware_limits(device: str, refresh: bool = False) -> HardwareLimits:
    """Cached limits of this device; measured (a few seconds) the first time or on refresh."""
    path = _cache_file(device)
    if path.exists() and not refresh:
        try:
            return HardwareLimits(**json.loads(path.read_text()))
        except (ValueError, TypeError):
            pass  # unreadable or from an older version: measure again
    gflops, dtype = measure_matmul(device)
    limits = HardwareLimits(
        device=describe_device(device),
        memory_bandwidth_gbs=round(measure_bandwidth(device), 2),
        matmul_gflops=round(gflops, 1),
        matmul_dtype=dtype,
        threads=torch.get_num_threads(),
        measured_at=time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    )
    write_json_atomic(path, asdict(limits))
    return limits

