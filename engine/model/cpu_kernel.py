"""The engine's C++ kernels for CPUs, built once, on request: paged decode attention, the one-call
decode step, the few-row product and a layer's small fused ops (csrc/paged_decode.cpp,
csrc/rows_matmul.cpp, csrc/fused_ops.cpp: one library), and the weight-only int8 linear
(csrc/int8_linear.cpp).

`build_kernel()` compiles them with the machine's C++ compiler and ninja (torch's C++
extension machinery), which takes about a minute each on two cores; `python -m engine
build-kernel` and `python -m lessons.warm` call it, with progress. Each library is kept in the
engine's cache directory under a name keyed by CPU, torch version and its sources' own hash.

`paged_decode_kernel()` and `int8_linear_kernel()` only load a library already built (a fraction
of a second) and never compile: an engine made inside a page's request must not sit in a
minute-long build with no progress to show. Where the attention kernel is not built, the
engine's "auto" backend is plain torch; int8 weights without their kernel are refused.

`build_alone()` compiles one source by itself, its ops under a namespace of their own, so that it
loads beside the library: a bench times a kernel's old source against its new one in one
process, and tests build the code paths other machines' flags select.

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
from collections.abc import Callable, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import torch

from ..device import cpu_model
from ..paths import cache_dir

log = logging.getLogger(__name__)

CSRC = Path(__file__).resolve().parent / "csrc"


@dataclass(frozen=True)
class CppKernel:
    """C++ sources built into one library, and the op it registers with torch."""

    sources: tuple[Path, ...]
    name: str  # the library's name
    namespace: str  # torch.ops.<namespace>.<op>
    op: str
    what: str  # for messages: "the C++ ... kernel"


# The decode attention (and one-call decode step), the few-row product and the fused residual-add
# norm and SwiGLU activation: one library.
PAGED_DECODE = CppKernel((CSRC / "paged_decode.cpp", CSRC / "rows_matmul.cpp",
                          CSRC / "fused_ops.cpp"),
                         "engine_cpu_paged_decode", "engine_cpu", "paged_decode",
                         "C++ decode-attention kernel")
INT8_LINEAR = CppKernel((CSRC / "int8_linear.cpp",), "engine_cpu_int8_linear", "engine_int8",
                        "int8_linear", "C++ int8 linear kernel")
KERNELS = (PAGED_DECODE, INT8_LINEAR)
# -march=native: the library is built on, and kept for, this machine only (the key names its CPU).
# -ffast-math lets the compiler vectorize the softmax's exp (glibc's libmvec) and reorder the dot
# products' sums; the kernel handles no infinities or NaNs (scores are finite).
# -fopenmp: at::parallel_for is a header template that runs its loop on one thread unless the
# library itself is compiled with OpenMP (without it, the kernels used one core); the library
# then needs libgomp.so.1, which resolves to the copy torch has already loaded (same soname).
CFLAGS = ["-O3", "-march=native", "-ffast-math", "-fopenmp"]
TICK_SECONDS = 5.0  # how often a build reports that it is still compiling

_lock = threading.Lock()
_alone: dict[str, Path] = {}  # build_alone's namespaces loaded: the library each


class KernelBuildError(RuntimeError):
    """The kernel could not be built here; the message says why in one line."""


def library_path(kernel: CppKernel = PAGED_DECODE) -> Path:
    """Where this machine's build of the kernel's current sources lives. The name holds the CPU
    model (the build is -march=native), never the core count: an engine worker pinned to one core
    must find the library built by a process that saw every core."""
    key = f"cpu: {cpu_model()}-torch{torch.__version__}-{source_digest(kernel)}"
    if kernel is not PAGED_DECODE:  # the attention kernel keeps the name it was built under
        key = f"{kernel.op}-{key}"
    safe = "".join(c if c.isalnum() else "_" for c in key)[:150]
    return cache_dir() / "kernels" / f"{safe}.so"


def source_digest(kernel: CppKernel = PAGED_DECODE) -> str:
    """A short hash of the kernel's sources and flags: names its build (and the matmul plans timed
    with it: a changed kernel is timed again)."""
    text = b"".join(source.read_bytes() for source in kernel.sources) + " ".join(CFLAGS).encode()
    return hashlib.sha256(text).hexdigest()[:12]


def _registered(kernel: CppKernel) -> bool:
    return hasattr(getattr(torch.ops, kernel.namespace), kernel.op)


def load_kernel(kernel: CppKernel) -> Callable | None:
    """The kernel's op, or None where it is not built on this machine. Loads a built library
    once per process; never compiles."""
    with _lock:
        if not _registered(kernel):
            path = library_path(kernel)
            if not path.exists():
                return None
            try:
                torch.ops.load_library(str(path))
            except (OSError, RuntimeError) as error:  # a stale or foreign file: not used
                log.warning("%s at %s does not load (%s)", kernel.what, path, one_line(error))
                return None
        return getattr(getattr(torch.ops, kernel.namespace), kernel.op)


def paged_decode_kernel() -> Callable | None:
    """The kernel, `(q, k_cache, v_cache, block_tables, seq_lens) -> out`, or None where it is
    not built on this machine (the engine then uses torch attention)."""
    return load_kernel(PAGED_DECODE)


def decode_step_kernel() -> Callable | None:
    """The one-call decode step, `(qkv, cos, sin, slots, k_cache, v_cache, block_tables,
    seq_lens, heads) -> out`: rotary, cache writes and attention of a step whose every row
    decodes (attention.PagedAttention); None where the library is not built."""
    if paged_decode_kernel() is None:
        return None
    return torch.ops.engine_cpu.decode_step


def rows_matmul_kernel() -> Callable | None:
    """The few-row product, `(x (M, in), weight (out, in)) -> x @ weight.T` (csrc/rows_matmul.cpp,
    matmul_plan's "cpp" variant); None where the library is not built."""
    if paged_decode_kernel() is None:
        return None
    return torch.ops.engine_cpu.rows_matmul


class FusedOps(NamedTuple):
    """The library's fused layer ops (csrc/fused_ops.cpp), used by LlamaModel.use_fused_ops."""

    add_rms_norm: Callable  # (x, residual, weight, eps) -> (x + residual, its RMS norm * weight)
    silu_mul: Callable  # (gate_up) -> silu(gate) * up
    decode_model: Callable  # a decode-only step whose products are all rows_matmul, in one call


def fused_layer_ops() -> FusedOps | None:
    """A layer's fused ops, or None where the library is not built."""
    if paged_decode_kernel() is None:
        return None
    ops = torch.ops.engine_cpu
    return FusedOps(ops.add_rms_norm, ops.silu_mul, ops.decode_model)


def int8_linear_kernel() -> Callable | None:
    """`(x float32 (R, K), w int8 (N, K), scale float32 (N,)) -> x @ (w * scale[:, None]).T`, or
    None where it is not built on this machine."""
    return load_kernel(INT8_LINEAR)


def build_kernel(tick: Callable[[float], None] | None = None) -> Path:
    """Compile every kernel this machine has no build of yet (the decode-attention kernel
    first), and load them; returns the attention kernel's library path. `tick(seconds so far)`
    is called every TICK_SECONDS while a compiler runs. Raises KernelBuildError, with the reason
    in one line, where one cannot be built (no C++ compiler, no ninja, a failed compile)."""
    for kernel in KERNELS:
        build_one(kernel, tick)
    return library_path(PAGED_DECODE)


def build_one(kernel: CppKernel, tick: Callable[[float], None] | None = None) -> Path:
    """Compile one kernel, unless this machine has a build of its current source, and load it."""
    path = library_path(kernel)
    if load_kernel(kernel) is not None:
        return path
    _compile(kernel.name, {source.name: source.read_text() for source in kernel.sources},
             CFLAGS, path, kernel.what, tick)
    return path


def build_alone(source: str, namespace: str, flags: Sequence[str] = (),
                tick: Callable[[float], None] | None = None):
    """One source of the library (its text), compiled by itself with CFLAGS and then `flags`,
    and loaded: its ops are registered as torch.ops.<namespace> and its C++ functions named
    apart (two macros rename the library's own), so it loads beside the library. For a bench
    that times a kernel's old source against its new one in one process, and tests of the code
    paths other machines' flags select (`-mno-avx512f`: the AVX2 path). Kept in the cache
    directory, keyed by the text and flags. Returns torch.ops.<namespace>; raises
    KernelBuildError as build_one does."""
    if not namespace.isidentifier():
        raise ValueError(f"build_alone: the namespace must be an identifier, not {namespace!r}")
    cflags = [*CFLAGS, *flags, f"-Dengine_cpu={namespace}", f"-Dengine_kernels={namespace}_cc"]
    digest = hashlib.sha256((source + " ".join(cflags)).encode()).hexdigest()[:12]
    path = cache_dir() / "kernels" / f"alone_{namespace}_{digest}.so"
    with _lock:
        loaded = _alone.get(namespace)
        if loaded not in (None, path):
            raise ValueError(f"build_alone: {namespace} already holds another build")
        if loaded is None and path.exists():
            torch.ops.load_library(str(path))
            _alone[namespace] = loaded = path
    if loaded is None:  # compiling loads it
        _compile(f"alone_{namespace}", {f"{namespace}.cpp": source}, cflags, path,
                 f"standalone build {namespace}", tick)
        _alone[namespace] = path
    return getattr(torch.ops, namespace)


def _compile(name: str, sources: dict[str, str], cflags: Sequence[str], path: Path, what: str,
             tick: Callable[[float], None] | None) -> None:
    """Compile the sources (file name: text) into one library at `path`, and load it."""
    missing = missing_tools()
    if missing:
        raise KernelBuildError(f"the {what} cannot be built here: no "
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
            files = [Path(build_dir) / file for file in sources]
            for file, text in zip(files, sources.values()):  # the texts the caller read
                file.write_text(text)
            with _lock:
                load(name=name, sources=[str(file) for file in files], extra_cflags=list(cflags),
                     extra_ldflags=["-fopenmp"], build_directory=build_dir,
                     is_python_module=False, verbose=False)
            os.replace(Path(build_dir) / f"{name}.so", path)
    except Exception as error:  # no compiler, no ninja, a failed compile: say which, in a line
        raise KernelBuildError(f"the {what} could not be built here: "
                               f"{one_line(error)}") from None
    finally:
        done.set()


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
