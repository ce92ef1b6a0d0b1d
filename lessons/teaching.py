"""What a lesson says around its demo, as data: what the reader will be able to do, the three
lines to keep, and the notes for whoever teaches it. Each lesson's words module
(lessons/words/<concept>.py) holds its own as module-level constants (OBJECTIVES, TAKEAWAY,
INSTRUCTOR beside PROSE and QUESTIONS); the lesson page, the printable course summary and the
instructor pages all read them from there.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from engine.errors import ResultError
from engine.lab.results import parse_result


@dataclass(frozen=True)
class InstructorNotes:
    """Notes for teaching one lesson. Numbers to expect are never written here: the instructor
    page reads them from this server's measurement cache (`python -m lessons.warm` fills it)."""

    minutes: int  # about how long the lesson takes in class, demo and discussion
    timing: str  # what takes the time: the demo's runs, when to start them
    misconceptions: tuple[str, ...]
    prompts: tuple[str, ...]  # questions to discuss


def check_takeaway(lines: tuple[str, ...]) -> tuple[str, ...]:
    """A takeaway is three lines: the finding, why, and what to do about it."""
    if len(lines) != 3 or not all(lines):
        raise ValueError("a takeaway is exactly three non-empty lines")
    return lines


# Lessons 1 and 4 use "compute-bound", "memory-bound" and "overhead-bound" before lesson 5
# measures them.
BOUND_PRIMER = """
<aside class="primer" aria-label="Three limits, in three sentences">
<p><strong>Three limits, in three sentences.</strong> Work is
<a href="app?page=vocabulary#compute-bound">compute-bound</a> when the processor's arithmetic sets
its pace: the data would arrive faster than the sums can be done with it. It is
<a href="app?page=vocabulary#memory-bound">memory-bound</a> when the processor waits for bytes to
arrive from memory, so that faster arithmetic would not help. It is <em>overhead-bound</em> when
neither is busy and the fixed cost of each step sets the pace: launching dozens of small
operations, the Python between them, waiting for the device; this is what CUDA graphs cut on a
GPU, by replaying a whole step as one launch. A model small enough to stay in the processor's
cache never waits for memory and often lands here. <a href="app?lesson=roofline">Lesson 5</a>
measures this machine's limits, its cache's among them.</p>
</aside>
"""


@dataclass(frozen=True)
class Cached:
    """One job's result from this server's measurement cache, as its typed record
    (engine.lab.results): what a lesson's expected_numbers() reads for the instructor page."""

    result: Any
    device: str
    measured_at: str


Lookup = Callable[[str, dict], Cached | None]  # (kind, params) -> the cached result, or None


def service_lookup(service) -> Lookup:
    """A Lookup on an engine service's measurement cache (its `cached`): it runs nothing, and a
    record of an older shape reads as not measured."""

    def lookup(kind: str, params: dict) -> Cached | None:
        record = service.cached(kind, params)
        if record is None:
            return None
        try:
            result = parse_result(kind, record["result"])
        except ResultError:  # a record of an older shape: as if not measured
            return None
        return Cached(result, record.get("device", ""), record.get("measured_at", ""))

    return lookup


def cached_lines(jobs: Iterable[tuple[str, tuple[str, dict]]], lookup: Lookup,
                 lines: Callable[[str, str, Cached], list[str]]) -> list[str]:
    """The instructor page's lines for the jobs, (label, (kind, params)) pairs, that the cache
    holds, in their order: `lines(label, kind, cached)` for each; a job not measured yet gives
    none."""
    out: list[str] = []
    for label, (kind, params) in jobs:
        cached = lookup(kind, params)
        if cached is not None:
            out.extend(lines(label, kind, cached))
    return out


def which_is_larger(a: float, b: float, margin: float, words: tuple[str, str, str]) -> str:
    """words[0] when a exceeds b by more than `margin` (a fraction), words[1] when b exceeds a
    by as much, words[2] otherwise: how a lesson says which prediction its numbers support."""
    if a > (1 + margin) * b:
        return words[0]
    if b > (1 + margin) * a:
        return words[1]
    return words[2]
