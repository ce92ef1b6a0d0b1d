"""The C++ paged decode-attention kernel for CPUs (csrc/paged_decode.cpp), built on first use.

torch's C++ extension machinery compiles the file with the machine's compiler (gcc or clang, and
ninja) the first time an engine asks for it, which takes about a minute on two cores; the built
library is kept in the engine's cache directory, keyed by CPU, torch version and the source's own
hash, so later processes load it in a fraction of a second. Where no compiler is found, or the
build fails, `paged_decode_kernel()` returns None and the engine keeps the plain torch path; the
reason is logged once.
"""

from __future__ import annotations

import hashlib
import logging
import threading
from collections.abc import Callable
from pathlib import Path

import torch

from ..device import describe_device
from ..paths import cache_dir

log = logging.getLogger(__name__)

SOURCE = Path(__file__).resolve().parent / "csrc" / "paged_decode.cpp"
# -march=native: the library is built on, and kept for, this machine only (the key names its CPU).
# -ffast-math lets the compiler vectorize the softmax's exp (glibc's libmvec) and reorder the dot
# products' sums; the kernel handles no infinities or NaNs (scores are finite).
CFLAGS = ["-O3", "-march=native", "-ffast-math", "-fopenmp-simd"]

_lock = threading.Lock()
_state: dict[str, Callable | None] = {}


def _build_dir() -> Path:
    digest = hashlib.sha256(SOURCE.read_bytes() + " ".join(CFLAGS).encode()).hexdigest()[:12]
    key = f"{describe_device('cpu')}-torch{torch.__version__}-{digest}"
    safe = "".join(c if c.isalnum() else "_" for c in key)[:150]
    path = cache_dir() / "kernels" / safe
    path.mkdir(parents=True, exist_ok=True)
    return path


def _load() -> Callable | None:
    from torch.utils.cpp_extension import load

    if not hasattr(torch.ops.engine_cpu, "paged_decode"):
        load(name="engine_cpu_paged_decode", sources=[str(SOURCE)], extra_cflags=CFLAGS,
             build_directory=str(_build_dir()), is_python_module=False, verbose=False)
    return torch.ops.engine_cpu.paged_decode


def paged_decode_kernel() -> Callable | None:
    """The kernel, `(q, k_cache, v_cache, block_tables, seq_lens) -> out`, or None where it
    cannot be built here. Built (or loaded) once per process."""
    with _lock:
        if "kernel" not in _state:
            try:
                _state["kernel"] = _load()
            except Exception as error:  # no compiler, no ninja, a failed build: plain torch
                log.warning("C++ decode-attention kernel unavailable (%s); using torch", error)
                _state["kernel"] = None
        return _state["kernel"]
