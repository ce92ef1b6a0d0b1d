"""The class run's calls on the engine service (EngineService inherits them): start and stop
the class run, send a student's request into it, change its knobs live, and read what the
teacher's console draws. Torch-free; thread-safe.

The class run is a job of kind class_run (engine.lab.jobs.classroom) that serves until it is
told to stop: it queues like any load-sized job, and once it runs, the engine is the class's.
It is never paused for other readers' jobs; their points run in its idle gaps (the service's
gap lending), their other jobs wait until the class run ends, and the service's status says
"class_mode". A job run in one of its gaps is not cached (engine.lab.messages), and the class
run itself is never cached.

Messages to the running job (requests, knob changes, stop) go through the worker's job pipe
(Dispatcher.send_to_running); those sent before its engine is built wait here and go when the
run says it is ready. What the job reports is gathered by engine.lab.class_state.ClassState.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from ..config import PRESETS
from ..errors import ConfigError
from . import registry
from .class_state import NOT_LIVE, ClassState

SETTINGS = ("preset", *registry.CLASS_RUN)  # the settings class_start takes and returns
STOP_WAIT_S = 30.0  # class_stop waits this long for the run's summary


class ClassService:
    """The class-run part of EngineService (a mixin: it uses submit, cancel and the
    dispatcher)."""

    _class: ClassState | None = None
    _class_job = None
    _class_lock: threading.Lock  # made by EngineService.__init__

    def class_start(self, settings: dict | None = None) -> dict:
        """Start the class run (a live continuous-batching run that students' requests join)
        with these settings (defaults filled in); returns the settings in force. With one
        live already, returns its settings. ConfigError for a bad value."""
        with self._class_lock:
            live = self._class
            if live is not None and live.active:
                with live.lock:
                    return {k: live.settings[k] for k in SETTINGS}
            params = class_params(settings)
            state = ClassState({k: params[k] for k in SETTINGS})
            self._class = state
            job = self.submit(registry.CLASS_KIND, params, on_event=self._class_event,
                              session_id="class-run", use_cache=False)
            if job.state == "error":
                self._class = None
                raise ConfigError(job.error or "the class run could not start")
            self._class_job = job
            state.run_id = job.id
            return dict(state.settings)

    def _class_event(self, event) -> None:
        """The class_run job's events: into the state; once it is ready, what waited goes."""
        state = self._class
        if state is None or (state.run_id is not None and event.job_id != state.run_id):
            return
        was_ready = state.ready
        state.on_job_event(event)
        if state.ready and not was_ready:
            with state.lock:
                pending, state.pending = state.pending, []
                for message in pending:
                    self._dispatcher.send_to_running(state.run_id, message)

    def _class_send_message(self, state: ClassState, message: dict) -> None:
        with state.lock:
            if state.ready:
                self._dispatcher.send_to_running(state.run_id, message)
            else:
                state.pending.append(message)

    def class_active(self) -> bool:
        state = self._class
        return state is not None and state.active

    def class_send(self, student: str, prompt: str, max_tokens: int,
                   on_event: Callable[[dict], None] | None = None) -> dict:
        """One request of one student into the class run: {"ok": True, "request_id"} or
        {"ok": False, "reason": one plain sentence}. on_event gets its admitted, token,
        finished or dropped events (plain dicts) on the service's thread."""
        state = self._class
        if state is None or not state.active:
            return {"ok": False, "reason": NOT_LIVE}
        name, reason = state.admit(student, prompt, max_tokens, on_event)
        if name is None:
            return {"ok": False, "reason": reason}
        self._class_send_message(state, {"op": "send", "id": name, "student": student,
                                         "prompt": prompt, "max_tokens": max_tokens,
                                         "sent": time.monotonic()})
        return {"ok": True, "request_id": name}

    def class_set(self, changes: dict, by: str = "teacher") -> dict:
        """Change live knobs (policy, max_batch, chunk_size, prefix_cache, background_rps,
        lanes) from the run's next step: {"applied": the checked changes, "t_s": the run time
        now}. ConfigError for a bad value, a knob that is not live, lanes under a policy other
        than continuous, or no class run live."""
        state = self._class
        if state is None or not state.active:
            raise ConfigError("No class run is live: start one first.")
        applied = check_changes(state, changes)
        self._class_send_message(state, {"op": "set", "changes": applied, "by": str(by)})
        return {"applied": applied, "t_s": state.now()}

    def class_snapshot(self, since_s: float = 0.0) -> dict:
        """What the teacher's console draws (engine.lab.class_state.ClassState.snapshot); an
        inactive, empty one before any class run."""
        state = self._class
        if state is None:
            return ClassState({k: p.default for k, p in
                               registry.get_spec(registry.CLASS_KIND).params.items()
                               if k in SETTINGS}).snapshot(since_s) | {"active": False}
        return state.snapshot(since_s)

    def class_stop(self) -> dict | None:
        """Stop the class run: its summary (the class_run result), or None when there was none
        live or it ended before its engine was ready. The engine is free for other jobs
        after."""
        with self._class_lock:
            state, job = self._class, self._class_job
            if state is None or job is None or not state.active:
                return None
            with state.lock:
                ready = state.ready
            if ready:
                self._dispatcher.send_to_running(state.run_id, {"op": "stop"})
            else:
                self.cancel(job)
            if not job.wait(STOP_WAIT_S):  # it did not stop: the service stops it
                self.cancel(job)
                job.wait(STOP_WAIT_S)
            state.active = False
            return dict(job.result) if job.state == "done" and job.result else None

    @property
    def class_mode(self) -> bool:
        """True while a class run holds the engine."""
        return self._dispatcher.class_mode


def class_params(settings: dict | None) -> dict:
    """The class_run job's params for class_start's settings, checked (ConfigError)."""
    settings = dict(settings or {})
    unknown = sorted(set(settings) - set(SETTINGS))
    if unknown:
        raise ConfigError(f"unknown class run setting {unknown[0]!r} (settings: "
                          f"{', '.join(SETTINGS)})")
    spec = registry.get_spec(registry.CLASS_KIND)
    params = spec.check(settings)
    registry.check_class_settings(params)
    longest = params["max_prompt_tokens"] + params["max_tokens"]
    context = PRESETS[params["preset"]].context
    if longest > context:
        raise ConfigError(f"prompts of {params['max_prompt_tokens']} tokens plus "
                          f"{params['max_tokens']} new tokens exceed the {params['preset']} "
                          f"context of {context} positions")
    return params


def check_changes(state: ClassState, changes: dict) -> dict:
    """Live knob changes checked against the class_run kind's limits (ConfigError)."""
    if not isinstance(changes, dict) or not changes:
        raise ConfigError("No change given: name one of " + ", ".join(registry.CLASS_KNOBS))
    unknown = sorted(set(changes) - set(registry.CLASS_KNOBS))
    if unknown:
        raise ConfigError(f"{unknown[0]!r} cannot be changed while the run goes on (live "
                          f"settings: {', '.join(registry.CLASS_KNOBS)})")
    spec = registry.get_spec(registry.CLASS_KIND)
    with state.lock:
        limit = state.info.get("max_batch_limit")
        current = dict(state.settings)
    checked = spec.check({**current, **changes})
    registry.check_class_settings(checked)
    if limit is not None and checked["max_batch"] > limit:
        raise ConfigError(f"max batch {checked['max_batch']} exceeds the engine's limit of "
                          f"{limit} sequences per step")
    return {k: checked[k] for k in changes}
