"""What a lesson page tells the class's store (lessons.classroom.store): the reader's prediction
when they pick, each measurement the page draws, the measurement put beside the prediction, and
each checkpoint answer; and, once the reader has picked, the line "How the class predicted: ..."
under their pick (never before: the class's picks would give them a prediction to copy).

The reader is their cookie id (`reader_id()`: the browser's number from lessons.reader_seed, no
name). Outside a served page there is no reader and nothing is recorded: tests, scripts and the
static copies (lessons.export) leave the class's file alone.

    recorder = Recorder.attach(page)     # lessons.base.LessonPage does this for every lesson
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import panel as pn

from engine.errors import ResultError

from ..reader_seed import reader_seed
from .predictions import class_line
from .store import Store, get_store

if TYPE_CHECKING:
    from engine.lab.events import Job, JobEvent
    from widgets.checkpoint import CheckpointQuestion

    from ..base import LessonPage

log = logging.getLogger(__name__)


def reader_id() -> str | None:
    """This reader's id for the class's records ("r" and their cookie's number), or None
    outside a served page."""
    doc = pn.state.curdoc
    if doc is None or doc.session_context is None:
        return None
    return f"r{reader_seed()}"


def _spread_fields(event: JobEvent) -> dict[str, Any]:
    """The shown numbers of a result: the median of what the job timed (its decode steps, engine
    steps, token gaps), how many were timed, and their p10 to p90 interval, in ms."""
    try:
        spread = getattr(event.result, "spread", None)
    except (ResultError, ValueError):
        spread = None
    if spread is None or not spread.count or spread.p50 is None:
        return {"what": event.kind}
    return {"what": f"{event.kind}: {spread.what} (median)", "value": spread.p50, "unit": "ms",
            "n": spread.count, "low": spread.p10, "high": spread.p90}


def _disturbed(event: JobEvent) -> str:
    check = (event.data or {}).get("check") if isinstance(event.data, dict) else None
    if isinstance(check, dict) and check.get("disturbed"):
        return "disturbed: " + "; ".join(check.get("reasons") or ["other work ran beside it"])
    return ""


def params_text(params: dict | None) -> str:
    """'batch_size=8, preset=tiny': a job's parameters, to ask the engine for the same again."""
    return ", ".join(f"{k}={v}" for k, v in sorted((params or {}).items()) if v is not None)


class Recorder:
    """One page view's link to the class's store (module docstring). `reader` None: records
    nothing."""

    def __init__(self, lesson: str, reader: str | None, store: Store | None = None,
                 engine_version=None):
        self.lesson = lesson
        self.reader = reader
        self._store = store
        self._engine_version = engine_version  # a callable giving it, asked once
        self._version: str | None = None
        self._picked = False
        self._last_event: JobEvent | None = None
        self._last_shown: tuple[str, str] | None = None
        self.question = ""

    @property
    def store(self) -> Store:
        """The store it writes to: the process's (get_store), or one given."""
        return self._store if self._store is not None else get_store()

    @store.setter
    def store(self, store: Store | None) -> None:
        self._store = store

    @classmethod
    def attach(cls, page: LessonPage, reader: str | None = None) -> Recorder:
        """A recorder fed by the page's prediction box, checkpoint and job runner."""
        rec = cls(page.slug, reader if reader is not None else reader_id(),
                  engine_version=lambda: page.jobs.service.status().get("engine_version", ""))
        box = page.prediction_box
        if box is not None:
            rec.question = box.question.prompt
            box.param.watch(lambda e: rec.predicted(box, e.new), "choice")
            box.shown_listeners.append(rec.revealed)
        page.checkpoint.answer_listeners.append(rec.answered)
        page.runner.result_listeners.append(rec.result)
        return rec

    def version(self) -> str:
        if self._version is None:
            try:
                self._version = (self._engine_version() if self._engine_version else "") or ""
            except Exception:  # noqa: BLE001 - a record without it beats no record
                log.debug("no engine version for the class's record", exc_info=True)
                self._version = ""
        return self._version

    # ---- the hooks --------------------------------------------------------------------------
    def predicted(self, box, pick: str | None) -> None:
        """The reader's pick (the first only: the box keeps it), then the class's picks."""
        if pick is None or self._picked or self.reader is None:
            return
        self._picked = True
        store = self.store
        store.record_prediction(self.reader, self.lesson, box.question.prompt, pick)
        if not store.ok:
            return
        counts = store.pick_counts(self.lesson, box.question.prompt, besides=self.reader)
        counts[pick] = counts.get(pick, 0) + 1  # theirs may still be in the writer's queue
        box.note(class_line(box.question.choices, counts))

    def revealed(self, measured: str, detail: str) -> None:
        """The measurement put beside the prediction: which choice it supports, and why."""
        if self.reader is None or self._last_shown == (measured, detail):
            return
        self._last_shown = (measured, detail)
        event = self._last_event
        self.store.record_shown(
            self.reader, self.lesson, f"prediction: {self.question}", choice=measured,
            detail=detail, **self._origin(event))

    def answered(self, asked: CheckpointQuestion) -> None:
        if self.reader is None or asked.answer is None:
            return
        self.store.record_answer(self.reader, self.lesson, asked.question.prompt, asked.answer,
                                 bool(asked.correct))

    def result(self, job: Job | None, event: JobEvent) -> None:
        """A result the page has drawn: its timed numbers and where they came from."""
        self._last_event = event
        if self.reader is None:
            return
        fields = _spread_fields(event)
        detail = "; ".join(t for t in (params_text(job.params if job else None),
                                       _disturbed(event)) if t)
        self.store.record_shown(self.reader, self.lesson, fields.pop("what"), detail=detail,
                                **fields, **self._origin(event))

    def _origin(self, event: JobEvent | None) -> dict[str, Any]:
        if event is None:
            return {"engine_version": self.version()}
        return {"device": event.device, "cached": event.cached,
                "measured_at": event.measured_at, "engine_version": self.version()}
