"""Shared test settings, set here because they must hold before any engine module is imported,
and the shared `server` fixture.

- The results cache: every test session gets a private one in a temp dir (removed at exit), so no
  test leaves numbers a reader will see, and tests never read a reader's results as their own. Set here once: constants and helpers the
  test files share live in tests/helpers.py, never imported from a conftest.
  $LLM_SPEED_TEST_CACHE names a directory to use instead (developers keep one to reuse the built
  C++ kernel between runs); a reader's $LLM_SPEED_CACHE is never used.
- Triton kernels run in the interpreter on CPU tensors when no GPU is present; the variable must be
  set before triton is first imported.
- `server` is a real `python -m engine serve` on 127.0.0.1 (a free port), for the HTTP tests and
  the lessons measuring an endpoint: started once when first asked for, stopped at the end, and
  bounded in time whatever happens to the tests.
- `machine_setup` is a results cache as a set-up machine has it (`python -m engine tune`), made
  once per session and copied into the caches of served apps and engine workers whose tests are
  not about making it (helpers.seed_machine_setup).
- `int8_kernel` is the C++ int8 linear kernel, built into the tests' cache for the engine tests,
  the quantization lesson's tests and the served app's engine worker (which reads the same cache).
- `serial` marks the tests that must run alone (suite_passes.SERIAL): `-n 2 -m "not serial"` runs the
  others two at a time with pytest-xdist, whose workers share this process's results cache.
- Every test gives back the cores it found: a page built in this process starts the app's engine
  service, which pins the process to the web's cores (engine.lab.client.get_service), and every
  server a later test starts would inherit that one core: its engine worker, finding one core,
  shares it with the web server, Chromium and pytest, so every job it measures is disturbed and
  measured twice more (the browser tests ran 2-3 times slower and timed out on a slow machine)."""

import atexit
import os
import shutil
import tempfile

import pytest
import torch
from helpers import SERVER_MAX_BATCH, engine_server, kernel_or_skip, run_engine
from suite_passes import is_serial, record

if os.environ.get("LLM_SPEED_TEST_CACHE"):
    os.environ["LLM_SPEED_CACHE"] = os.environ["LLM_SPEED_TEST_CACHE"]
else:
    _private_cache = tempfile.mkdtemp(prefix="llm-speed-test-cache-")
    atexit.register(shutil.rmtree, _private_cache, ignore_errors=True)
    os.environ["LLM_SPEED_CACHE"] = _private_cache
    # pytest-xdist's workers, started by this process after this line, share it (one kernel
    # build, one set of plans); this process removes it when the run ends
    os.environ["LLM_SPEED_TEST_CACHE"] = _private_cache

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

# The apps the tests serve do not start the first-start set-up job (kernels, every preset's
# plans: minutes of the worker's time); the machine_setup fixture seeds what they need, and the
# set-up job has tests of its own (tests/engine/lab/test_engine_build.py, test_about_setup.py).
os.environ.setdefault("LLM_SPEED_SETUP", "0")

CORES_AT_START = os.sched_getaffinity(0)


def pytest_collection_modifyitems(items):
    # runs before pytest's own `-m` deselection (a conftest's hooks come first): `items` is
    # everything collected here
    for item in items:
        if is_serial(item.nodeid):
            item.add_marker(pytest.mark.serial)
    global _collected
    _collected = len(items)


_collected = 0


def pytest_collection_finish(session):
    """The counts `python -m tests` checks: collected here, and kept by `-m`."""
    record(_collected, len(session.items))


@pytest.fixture(autouse=True)
def cores_given_back():
    """After each test: this process (every thread) back on the cores it started with."""
    yield
    if os.sched_getaffinity(0) != CORES_AT_START:
        from engine.lab import cores

        cores.pin(0, CORES_AT_START)


@pytest.fixture(scope="session")
def int8_kernel():
    """The C++ int8 linear kernel, built once into the tests' own cache ($LLM_SPEED_CACHE); the
    tests that need it (int8 weights) are skipped where it cannot be built (failed in CI:
    helpers.kernel_or_skip)."""
    from engine.model.cpu_kernel import INT8_LINEAR, int8_linear_kernel

    kernel_or_skip(INT8_LINEAR)
    return int8_linear_kernel()


# The presets the served app's tests run (the speculative lesson's draft model among them).
SETUP_PRESETS = ("tiny", "draft")


@pytest.fixture(scope="session")
def machine_setup_run(tmp_path_factory):
    """`python -m engine tune --preset tiny --preset draft` in a fresh results cache, run once
    per session: (the cache, the finished process). tests/engine/cli/test_tune.py checks what
    it printed and left; the other users take the cache (machine_setup)."""
    cache = tmp_path_factory.mktemp("machine-setup")
    presets = [arg for name in SETUP_PRESETS for arg in ("--preset", name)]
    out = run_engine(["tune", *presets], cache, timeout=600)
    return cache, out


@pytest.fixture(scope="session")
def machine_setup(machine_setup_run):
    """A results cache after `python -m engine tune --preset tiny --preset draft`: matrix-product
    plans timed as the lab's worker runs (pinned to the engine's cores, one thread per core, so
    under the key the worker reads) and the machine's limits where they were measured quietly.
    Made once per session: each served app and engine worker started with a copy no longer
    times the plans and measures the limits on its own."""
    cache, out = machine_setup_run
    assert out.returncode == 0, f"the machine's set-up failed: {out.stderr[-2000:]}"
    return cache


START_S = 300  # the server is up within this long: a bound for a broken start, not a timing claim


@pytest.fixture(scope="session")
def server(tmp_path_factory):
    """The served tiny model: yields the JSON line `serve --json` prints (url, model, ...)."""
    log = tmp_path_factory.mktemp("server") / "stderr.txt"
    with engine_server(log, ["--kv-budget-mib", "16", "--max-batch", str(SERVER_MAX_BATCH)],
                       START_S) as info:
        yield info
