"""What the machine is: `info` (device, threads, presets, measured memory bandwidth, matmul
peak and last-level cache bandwidth) and the worker's identity, which keys the measurement cache."""

from __future__ import annotations

import torch

from ...config import PRESETS
from ...device import configure_threads, describe_device, resolve_device
from ...hardware import hardware_limits
from ...llm_engine import ENGINE_VERSION
from ..control import Control
from ..registry import Emit
from .probe import measure_checked


def machine_info(device: str = "auto", refresh: bool = False) -> dict:
    """What `python -m engine info --json` prints: the device, thread count, every preset's shape
    and the device's measured memory bandwidth and matmul peak (cached per machine once measured
    quietly; `check` is the disturbance check of limits measured now, None when read from disk)."""
    device = resolve_device(device)
    if device == "cpu":
        configure_threads()
    limits = hardware_limits(device, refresh=refresh, checked=measure_checked)
    return {
        "device": device,
        "device_name": describe_device(device),
        "torch": str(torch.__version__),
        "threads": torch.get_num_threads(),
        "presets": [cfg.describe(device) for cfg in PRESETS.values()],
        "memory_bandwidth_gbs": limits.memory_bandwidth_gbs,
        "matmul_gflops": limits.matmul_gflops,
        "matmul_dtype": limits.matmul_dtype,
        "ridge_flop_per_byte": round(limits.ridge_flop_per_byte, 2),
        "cache_bandwidth_gbs": limits.cache_bandwidth_gbs,
        "llc_bytes": limits.llc_bytes,
        "limits_measured_at": limits.measured_at,
        "check": limits.check,  # None when read from disk (measured quietly before)
    }


def info_job(params: dict, emit: Emit, control: Control) -> dict:
    """The machine: device, threads, presets, measured memory bandwidth and matmul peak."""
    emit("progress", {"done": 0, "total": 1, "message": "measuring memory bandwidth and matmul"})
    return {**machine_info(params["device"]), "spread": None}  # nothing timed now


def worker_identity() -> dict:
    """What the service keys cached results by: the device the worker runs on and the engine's
    version."""
    return {"device": describe_device(resolve_device("auto")), "engine_version": ENGINE_VERSION}
