"""The C++ paged decode-attention kernel for CPUs (csrc/paged_decode.cpp): built once, on request.

`build_kernel()` compiles the file with the machine's C++ compiler and ninja (torch's C++
extension machinery), which takes about a minute on two cores; `python -m engine build-kernel`
and `python -m lessons.warm` call it, with progress. The library is kept in the engine's cache
directory under a name keyed by CPU, torch version and the source's own hash.

`paged_decode_kernel()` only loads a library already built (a fraction of a second) and never
compiles: an engine made inside a page's request must not sit in a minute-long build with no
progress to show. Where none is built, the engine's "auto" backend is plain torch.

Each build runs in a fresh directory and its library is renamed into place: a build that is
killed leaves nothing behind that makes the next one wait (torch's own build-directory lock would).
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import tempfile
import threading
import time
import warnings
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path

import torch

from ..device import describe_device
from ..paths import cache_dir

log = logging.getLogger(__name__)

SOURCE = Path(__file__).resolve().parent / "csrc" / "paged_decode.cpp"
NAME = "engine_cpu_paged_decode"
# -march=native: the library is built on, and kept for, this machine only (the key names its CPU).
# -ffast-math lets the compiler vectorize the softmax's exp (glibc's libmvec) and reorder the dot
# products' sums; the kernel handles no infinities or NaNs (scores are finite).
CFLAGS = ["-O3", "-march=native", "-ffast-math", "-fopenmp-simd"]
TICK_SECONDS = 5.0  # how often a build reports that it is still compiling

_lock = threading.Lock()


class KernelBuildError(RuntimeError):
    """The kernel could not be built here; the message says why in one line."""


def library_path() -> Path:
    """Where this machine's build of the current source lives."""
    digest = hashlib.sha256(SOURCE.read_bytes() + " ".join(CFLAGS).encode()).hexdigest()[:12]
    key = f"{describe_device('cpu')}-torch{torch.__version__}-{digest}"
    safe = "".join(c if c.isalnum() else "_" for c in key)[:150]
    return cache_dir() / "kernels" / f"{safe}.so"


def _registered() -> bool:
    return hasattr(torch.ops.engine_cpu, "paged_decode")


def paged_decode_kernel() -> Callable | None:
    """The kernel, `(q, k_cache, v_cache, block_tables, seq_lens) -> out`, or None where it is
    not built on this machine. Loads a built library once per process; never compiles."""
    with _lock:
        if not _registered():
            path = library_path()
            if not path.exists():
                return None
            try:
                torch.ops.load_library(str(path))
            except (OSError, RuntimeError) as error:  # a stale or foreign file: torch instead
                log.warning("C++ decode-attention kernel at %s does not load (%s); using torch",
                            path, one_line(error))
                return None
        return torch.ops.engine_cpu.paged_decode


def build_kernel(tick: Callable[[float], None] | None = None) -> Path:
    """Compile the kernel (if this machine has no build of the current source yet) and load it;
    returns the library's path. `tick(seconds so far)` is called every TICK_SECONDS while the
    compiler runs. Raises KernelBuildError, with the reason in one line, where it cannot be
    built (no C++ compiler, no ninja, a failed compile)."""
    path = library_path()
    if paged_decode_kernel() is not None:
        return path
    missing = missing_tools()
    if missing:
        raise KernelBuildError(f"the C++ decode-attention kernel cannot be built here: no "
                               f"{missing} found (Debian: apt install g++ ninja-build)")
    from torch.utils.cpp_extension import load

    path.parent.mkdir(parents=True, exist_ok=True)
    done = threading.Event()
    start = time.monotonic()

    def ticker() -> None:
        while not done.wait(TICK_SECONDS):
            tick(time.monotonic() - start)

    if tick is not None:
        threading.Thread(target=ticker, name="kernel-build-ticker", daemon=True).start()
    try:
        with tempfile.TemporaryDirectory(dir=path.parent, prefix="build-") as build_dir, \
                warnings.catch_warnings(), _quiet(logging.getLogger("torch.utils.cpp_extension")):
            warnings.simplefilter("ignore")  # torch's notes on compiler versions: not the reader's
            with _lock:
                load(name=NAME, sources=[str(SOURCE)], extra_cflags=CFLAGS,
                     build_directory=build_dir, is_python_module=False, verbose=False)
            os.replace(Path(build_dir) / f"{NAME}.so", path)
    except Exception as error:  # no compiler, no ninja, a failed compile: say which, in a line
        raise KernelBuildError(f"the C++ decode-attention kernel could not be built here: "
                               f"{one_line(error)}") from None
    finally:
        done.set()
    return path


def missing_tools() -> str | None:
    """The build tool this machine lacks (the C++ compiler torch would call, or ninja), if any."""
    compiler = os.environ.get("CXX", "c++")
    for tool in (compiler, "ninja"):
        if shutil.which(tool) is None:
            return f"{tool!r} ({'C++ compiler' if tool == compiler else 'build tool'})"
    return None


@contextmanager
def _quiet(logger: logging.Logger):
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def one_line(error: BaseException, limit: int = 300) -> str:
    """An error's message on one line: a compiler's first "error:" line where there is one (its
    output can run to pages), else the message itself."""
    lines = str(error).splitlines()
    errors = [line for line in lines if "error:" in line]
    text = " ".join((errors[0] if errors else " ".join(lines)).split()) or type(error).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."
