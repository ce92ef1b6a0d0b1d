"""The "setup" job: the engine sets itself up at the app's first start, in the worker.

A newcomer who runs `panel serve app.py` gets the engine the lessons describe without a
teacher's set-up steps: the app submits this job at start-up (app.py), and the worker builds the
C++ kernels (engine.model.cpu_kernel.build_kernel: a minute or more on two cores) and then
builds each lesson preset's engine (engine.cli.tune.LESSON_PRESETS), which times its
matrix-product plan, products and whole step, where this machine has none. What is on disk is
not built or timed again, so a later start finishes in seconds.

It is a long job like the others: it queues behind readers' points, and the service pauses it
for shorter jobs through the `cancelled()` hook every long body polls: between a model's build
steps, and every POLL_S while the compiler runs in a thread of its own; cancelled, it stops there, and a preset's half-made build is kept
for the next try (engine.lab.jobs.engines.build). Its progress goes to its submitter as events
and to the set-up state on disk (engine.lab.setup_state) that the about page shows.

Engines built on the plain path before the kernels existed are dropped once they are built
(engines.drop_plain_engines), so that every later job measures on the fast path; results
carry the path they were measured on (LLMEngine.path), and the cache keeps each under its own.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import replace

from ...cli.tune import LESSON_PRESETS
from ...device import resolve_device
from ...model.cpu_kernel import KernelBuildError, build_kernel
from ..registry import Cancelled, Emit
from ..setup_state import SetupState, read_state, write_state
from .engines import build, drop_plain_engines, engine_key

PRESETS = LESSON_PRESETS  # made ready in this order: tiny, the first lessons' model, first
POLL_S = 0.5  # how often the job asks to pause while a compiler runs
TICK_S = 5.0  # how often it says the compiler still runs


def setup_job(params: dict, emit: Emit, cancelled: Cancelled) -> dict | None:
    """Build the kernels, then each lesson preset's engine (timing its plan where none is on
    disk); None where it was cancelled (the state on disk says it stopped)."""
    started = time.monotonic()
    presets = list(PRESETS)
    state = SetupState(state="running", total=1 + len(presets), path=read_state().path)

    def say(done: int, message: str, **more) -> None:
        nonlocal state
        state = replace(state, done=done, message=message, **more)
        write_state(state)
        emit("progress", {"done": done, "total": state.total, "message": message})

    say(0, "building the C++ kernels")
    if resolve_device("auto").startswith("cuda"):
        say(1, "a GPU: no CPU kernels needed", kernels="not needed")
    else:
        built = build_kernels_pausably(
            cancelled, lambda seconds: say(0, f"building the C++ kernels ({seconds:.0f} s)"))
        if built is None:
            return _stopped(state)
        if isinstance(built, KernelBuildError):
            say(1, "the C++ kernels cannot be built here", kernels="unavailable",
                kernel_message=str(built))
        else:
            say(1, "the C++ kernels are built", kernels="built")
            drop_plain_engines()
    for done, name in enumerate(presets, 2):
        if cancelled():
            return _stopped(state)
        key = engine_key({"preset": name, "device": "auto", "backend": "auto",
                          "kv_budget_mib": None, "random_weights": False})
        if build(key, cancelled, lambda what, n=name, d=done: say(d - 1, f"{n}: {what}")) is None:
            return _stopped(state)
        say(done, f"{name} is ready")
    path = "plain" if state.kernels == "unavailable" else "fast"
    say(state.total, "done", path=path)
    write_state(replace(state, state="done"))
    return {"kernels": state.kernels, "kernel_message": state.kernel_message,
            "presets": presets, "path": path, "seconds": time.monotonic() - started}


def build_kernels_pausably(cancelled: Cancelled, waiting: Callable[[float], None]):
    """Build the kernels in a thread of their own while this job polls cancelled() every
    POLL_S: a compile takes a minute or more and cannot stop half-way, so readers' jobs run in
    the job's pauses meanwhile (on the plain path, their disturbance check seeing the compiler)
    instead of waiting for it. `waiting(seconds so far)` is called from this thread every
    TICK_S (the job's events are sent from one thread only). True when built, the
    KernelBuildError when they cannot be, None when the job was cancelled (the compile goes on
    and its library is kept for the next try)."""
    outcome: list = []

    def compile_them() -> None:
        try:
            build_kernel()
            outcome.append(True)
        except KernelBuildError as e:
            outcome.append(e)

    builder = threading.Thread(target=compile_them, name="kernel-build", daemon=True)
    started = said = time.monotonic()
    builder.start()
    while builder.is_alive():
        builder.join(POLL_S)
        if not builder.is_alive():
            break
        if time.monotonic() - said >= TICK_S:
            said = time.monotonic()
            waiting(said - started)
        if cancelled():
            return None
    return outcome[0] if outcome else KernelBuildError("the kernel build stopped unexpectedly")


def _stopped(state: SetupState) -> None:
    write_state(replace(state, state="stopped"))
    return None
