"""Which device the engine runs on, its dtypes, and waiting for it to finish before a clock is read."""

from __future__ import annotations

import os

import torch

# The dtype names engine.config uses (torch-free there) to torch's dtypes.
DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def torch_dtype(name: str) -> torch.dtype:
    """The torch dtype of a name from engine.config ("float32", "float16", "bfloat16")."""
    return DTYPES[name]


def resolve_device(name: str = "auto") -> str:
    """'auto' means CUDA when a GPU is visible, else CPU."""
    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError("device 'cuda' asked for, but no CUDA device is visible")
    return name


def configure_threads() -> int:
    """Use every core the process may run on (torch defaults to physical cores, sometimes fewer)."""
    wanted = os.environ.get("ENGINE_THREADS")
    count = int(wanted) if wanted else len(os.sched_getaffinity(0))
    torch.set_num_threads(max(1, count))
    return torch.get_num_threads()


def synchronize(device: str) -> None:
    """Wait for queued device work, so that a clock read next measures finished work."""
    if str(device).startswith("cuda"):
        torch.cuda.synchronize()


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo ("CPU" where it cannot be read)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "CPU"


def describe_device(device: str) -> str:
    """A human name for the device: the GPU's name, or the CPU model and core count."""
    if str(device).startswith("cuda"):
        return f"cuda: {torch.cuda.get_device_name(0)}"
    model = cpu_model()
    cores = len(os.sched_getaffinity(0))
    return f"cpu: {model} ({cores} core{'' if cores == 1 else 's'})"
