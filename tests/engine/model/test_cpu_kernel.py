"""The C++ kernel's fail-over: engines never compile it (an engine made inside a page's request
must not sit in a build); where it is not built "auto" is plain torch, an explicit --backend cpp
is refused in one line, and a build that cannot run says why in one line, without a traceback.

Each case runs in a fresh process with an empty cache: this process may have the kernel loaded."""

from __future__ import annotations

import os
import subprocess
import sys

BACKEND_OF_AUTO = ("import torch; from engine.llm_engine import default_backend; "
                   "print(default_backend('cpu', torch.float32))")


def run(args: list[str], cache, **env) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "LLM_SPEED_CACHE": str(cache), **env})


def test_auto_backend_is_torch_until_the_kernel_is_built_and_builds_nothing(tmp_path):
    """...and the matmul plan does not offer the library's few-row product either."""
    offered = "; from engine.model.matmul_plan import available_variants as a; print('cpp' in a())"
    out = run(["-c", BACKEND_OF_AUTO + offered], tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["torch", "False"]
    assert not list((tmp_path / "kernels").glob("*.so"))


def test_auto_backend_is_cpp_where_the_kernel_is_built(cpp_kernel):
    out = run(["-c", BACKEND_OF_AUTO], os.environ["LLM_SPEED_CACHE"])  # where cpp_kernel built
    assert out.stdout.strip() == "cpp", out.stderr


def test_explicit_cpp_backend_without_a_build_is_refused_in_one_line(tmp_path):
    out = run(["-m", "engine", "generate", "--prompt", "hi", "--backend", "cpp"], tmp_path)
    assert out.returncode == 2
    assert "Traceback" not in out.stderr
    assert out.stderr.strip().splitlines() == [
        "error: the cpp attention backend's kernel is not built on this machine: run python -m "
        "engine build-kernel (about a minute), or use --backend torch"]


def test_build_without_a_compiler_says_so_in_one_line(tmp_path):
    out = run(["-m", "engine", "build-kernel"], tmp_path, CXX="no-such-compiler-here")
    assert out.returncode == 1
    assert "Traceback" not in out.stderr
    error = [line for line in out.stderr.splitlines() if line.startswith("error:")]
    assert len(error) == 1
    assert "no 'no-such-compiler-here' (C++ compiler) found" in error[0]
    assert "plain torch attention" in error[0]
    assert not list(tmp_path.rglob("*.so"))  # no library, half-built or not, left behind


def test_a_worker_pinned_to_one_core_finds_the_library_built_on_every_core():
    """The app's engine worker runs on a core of its own: the library's name must not change
    with the cores a process may use (it once held the core count, and the app never used the
    build). Every kernel, on one core and on all of them."""
    from unittest import mock

    from engine.model.cpu_kernel import KERNELS, library_path

    every_core = [library_path(kernel) for kernel in KERNELS]
    with mock.patch("os.sched_getaffinity", return_value={0}):
        one_core = [library_path(kernel) for kernel in KERNELS]
    assert one_core == every_core
    assert len(set(every_core)) == len(KERNELS)
