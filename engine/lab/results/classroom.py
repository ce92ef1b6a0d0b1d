"""The result of the class run (engine.serve.class_run): one live continuous-batching run that a
class's requests join."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from .record import Record


@dataclass(frozen=True)
class ClassRunResult(Record):
    """The class run's summary (engine.serve.class_run): its settings at the end, how long it
    ran, the students and requests it served, the time to first token and the gaps between
    tokens (p50, p90, p99, count), and every knob change with the step it applied from."""

    job_kind: ClassVar[str] = "class_run"
    device: str
    preset: str
    settings: dict
    duration_s: float
    students: int
    requests: int
    background_requests: int
    finished: int
    dropped: int
    output_tokens: int
    steps: int
    ttft_ms: dict
    itl_ms: dict
    knob_changes: list[dict]
