"""Where the app's first-start set-up stands on this machine, and which path the engine measures on.

The engine the lessons describe builds its C++ kernels (a minute or more on two cores) and times
its matrix-product plans (tens of seconds for the small preset) once per machine. The app starts
that in its engine worker at start-up (the "setup" job, engine.lab.jobs.setup), and until it is
done the engine measures on the plain path (torch's own ops, products as the library lays them
out): slower, and a different engine. So this state is one small JSON file in the cache
directory, written by the job as it goes and read by the web side, torch-free:

- the about page shows its progress, and once, where the kernels cannot be built, why;
- the result cache keys every result by the path it is measured on (engine.lab.cache), so a
  result of the plain path is never shown as the fast path's.

`path` is "plain" until the set-up has finished with the kernels built (or on a GPU, whose
engine needs no CPU kernels); "fast" after.
"""

from __future__ import annotations

import json
import os
import threading
from dataclasses import asdict, dataclass, replace

from ..paths import cache_dir, write_json_atomic

STATE_FILE = "engine-setup.json"
# "0" leaves the set-up out of this server's start (a test or a benchmark of the served app that
# sets the machine up itself, or a machine where a teacher ran `build-kernel` and `tune`).
SETUP_ENV = "LLM_SPEED_SETUP"
PATHS = ("plain", "fast")
STATES = ("not started", "running", "stopped", "done")
KERNELS = ("unknown", "built", "unavailable", "not needed")


@dataclass(frozen=True)
class SetupState:
    """The set-up's progress: `done` of `total` steps (the kernels, then each lesson preset's
    engine), what it is doing in a few words, the kernels' state (and why they are unavailable,
    in one line), and the path results are measured on."""

    state: str = "not started"
    done: int = 0
    total: int = 0
    message: str = ""
    kernels: str = "unknown"
    kernel_message: str = ""
    path: str = "plain"


_read: dict[str, tuple[float, SetupState]] = {}  # file -> (mtime, state): one read per change


def read_state() -> SetupState:
    """The state on disk, or the state before any set-up (plain path) where there is none or it
    does not parse."""
    path = cache_dir() / STATE_FILE
    try:
        mtime = os.stat(path).st_mtime_ns
    except OSError:
        return SetupState()
    known = _read.get(str(path))
    if known is not None and known[0] == mtime:
        return known[1]
    try:
        data = json.loads(path.read_text())
        state = SetupState(**{k: data[k] for k in asdict(SetupState()) if k in data})
    except (OSError, ValueError, TypeError):
        return SetupState()
    if state.path not in PATHS:
        state = replace(state, path="plain")
    _read[str(path)] = (mtime, state)
    return state


def write_state(state: SetupState) -> None:
    """Keep the state for the web side (atomically: a reader never sees half a file)."""
    write_json_atomic(cache_dir() / STATE_FILE, asdict(state))


def engine_path() -> str:
    """The path the engine measures on now: "fast" once the set-up is done, else "plain"."""
    return read_state().path


def describe(state: SetupState) -> str:
    """The set-up in a sentence, for the about page (plain text)."""
    if state.state == "not started":
        return ("The engine's set-up (its C++ kernels, its matrix-product plans) has not started "
                "yet: results are measured on the plain path until it is done.")
    where = f" ({state.message})" if state.message else ""
    if state.state == "running":
        return (f"Setting the engine up: step {state.done} of {state.total}{where}. Until it is "
                f"done, results are measured on the plain path and labelled so.")
    if state.state == "stopped":
        return (f"The engine's set-up stopped after step {state.done} of {state.total}; it goes "
                f"on at the app's next start. Results are measured on the plain path.")
    if state.kernels == "unavailable":
        return (f"The engine runs without its C++ kernels here ({state.kernel_message}): every "
                f"result is measured on the plain path.")
    return "The engine is set up: its C++ kernels are built and its plans timed on this machine."


_submitted = threading.Event()


def start_setup(service) -> bool:
    """Submit the "setup" job to the engine service (engine.lab.client.EngineService), once per
    web process: app.py calls it at start-up, and each session's run of app.py again. It belongs
    to no session, so no reader leaving cancels it; it queues and pauses like any long job.
    False where it was submitted before, $LLM_SPEED_SETUP is "0", or there is no service (a
    page built without an engine worker)."""
    if service is None or os.environ.get(SETUP_ENV, "1") == "0" or _submitted.is_set():
        return False
    _submitted.set()
    service.submit("setup", {}, use_cache=False)
    return True
