"""Constants and helpers shared across the test packages, as a plain module.

Test files import it as `helpers` (tests/ is on sys.path once the root conftest is loaded), never
as `tests.helpers` and never from a conftest: a conftest imported by name runs a second time
under that name, and its import-time settings (the private results cache) run again with it.

- `run_python` / `run_engine`: a subprocess of this interpreter with its own results cache.
- `wait_until`: poll a condition with a deadline instead of sleeping a guessed time.
- `kernel_or_skip`: build a C++ kernel, or skip where the compiler cannot; with
  REQUIRE_KERNELS_ENV set (CI sets it), a failed build fails the test instead, so a broken
  compiler cannot turn a hundred kernel tests into a green run of skips.
- `reset_panel_state`: the autouse fixture of the packages that build Panel objects in this
  process (tests/lessons, tests/widgets): each test starts from a clean pn.state.
- `seed_machine_setup`: copy what a machine's set-up leaves in a cache (built kernels, matmul
  plans, measured limits, the probe profile) into another cache, so a test that is not about
  making them starts where a set-up machine would.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

import pytest

SERVER_MAX_BATCH = 8  # the shared `server` fixture's --max-batch (the HTTP tests read it)
LIFETIME_S = 5400  # a server a test starts is killed after this however the session ends
REQUIRE_KERNELS_ENV = "LLM_SPEED_REQUIRE_KERNELS"

# Prompts of three lengths for the engine's output checks (correctness, speculative decoding).
PROMPTS = [
    "The function returns a new list",
    "If the file does not exist,",
    "A class is a way to bundle data and behaviour. Each instance",
]

T = TypeVar("T")


@contextmanager
def engine_server(log: Path, args: list[str], start_s: float) -> Iterator[dict]:
    """A real `python -m engine serve --port 0 --json` with `args`, killed after LIFETIME_S
    whatever happens to the tests: yields the JSON line it prints (url, model, ...); its stderr
    goes to `log`, whose tail a start that takes longer than start_s reports."""
    with open(log, "w") as err:
        proc = subprocess.Popen(
            ["timeout", str(LIFETIME_S), sys.executable, "-m", "engine", "serve", "--port", "0",
             "--json", *args],
            stdout=subprocess.PIPE, stderr=err, text=True)
    line: list[str] = []
    reader = threading.Thread(target=lambda: line.append(proc.stdout.readline()), daemon=True)
    reader.start()
    reader.join(start_s)
    try:
        if not line or not line[0]:
            raise RuntimeError(f"the server did not start: {log.read_text()[-2000:]}")
        yield json.loads(line[0])
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def run_python(args: list[str], cache, timeout: float = 300, **env) -> subprocess.CompletedProcess:
    """`python <args>` with $LLM_SPEED_CACHE set to `cache` (and `env` added), output captured."""
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "LLM_SPEED_CACHE": str(cache), **env})


def run_engine(args: list[str], cache, timeout: float = 300, **env) -> subprocess.CompletedProcess:
    """`python -m engine <args>` with its own results cache (see run_python)."""
    return run_python(["-m", "engine", *args], cache, timeout, **env)


def wait_until(condition: Callable[[], T], timeout_s: float = 30.0, what: str = "condition",
               every_s: float = 0.05) -> T:
    """The first true value of `condition()`, polled every `every_s`; fails naming `what` if none
    came within `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} did not happen within {timeout_s} s")
        time.sleep(every_s)


def kernels_required() -> bool:
    return os.environ.get(REQUIRE_KERNELS_ENV, "") not in ("", "0")


def kernel_or_skip(spec) -> None:
    """Build a C++ kernel (engine.model.cpu_kernel's spec) into the tests' cache: skipped where it
    cannot be built, failed instead where kernels are required (CI)."""
    from engine.model.cpu_kernel import KernelBuildError, build_one

    try:
        build_one(spec)
    except KernelBuildError as e:
        if kernels_required():
            pytest.fail(f"{REQUIRE_KERNELS_ENV} is set and the kernel did not build: {e}",
                        pytrace=False)
        pytest.skip(str(e))


# What a machine's set-up (`build-kernel`, `tune`, a first engine) leaves in a results cache.
MACHINE_SETUP = ("kernels", "matmul-plan-*.json", "hardware-checked-*.json", "probe-*.json")


def seed_machine_setup(source: Path, target: Path) -> Path:
    """Copy the machine's set-up files from one results cache to another (never the results)."""
    source, target = Path(source), Path(target)
    target.mkdir(parents=True, exist_ok=True)
    for pattern in MACHINE_SETUP:
        for path in source.glob(pattern):
            if path.is_dir():
                shutil.copytree(path, target / path.name, dirs_exist_ok=True)
            else:
                shutil.copy2(path, target / path.name)
    return target


@pytest.fixture(autouse=True)
def reset_panel_state():
    """After each test, a clean pn.state (Panel's own test-suite habit), so one test's documents
    and caches never leak into the next. Panel is imported here, not above: the engine's tests
    never load it."""
    yield
    import panel as pn

    pn.state.reset()
    pn.state.clear_caches()


def run_coroutine(coro):
    """asyncio.run(coro) in a thread of its own: Playwright's sync API keeps an event loop
    running in the main thread for the whole session once a browser test has run, and
    asyncio.run refuses to start beside it."""
    import asyncio
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()
