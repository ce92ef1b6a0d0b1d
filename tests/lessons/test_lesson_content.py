"""Every lesson follows the pattern (lessons.base): objectives, a prediction, a three-line
takeaway, instructor notes, a checkpoint with a question on the reader's own numbers; the
choices are shuffled per reader with the key still right and reachable in every position; the
distractors are of similar length; no figure cites a course brief; one heading style."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

from lessons.on_a_gpu import GpuBox
from lessons.registry import LESSONS, lesson_class
from widgets.checkpoint import CheckpointQuestion, MeasuredQuestion, Question

ROOT = Path(__file__).resolve().parents[2]
CLASSES = [lesson_class(info) for info in LESSONS]
FIXED = [(cls.slug, q) for cls in CLASSES for q in cls.questions if isinstance(q, Question)]
WITH_GPU_BOX = {"two-clocks", "knob", "roofline", "chunked-prefill", "slo-goodput",
                "prefix-cache", "speculative", "quantization", "capacity", "experts",
                "average-lies", "three-schedules", "kv-cache",
                "batch-invariance",
                "disaggregation"}


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.slug)
def test_every_lesson_has_the_pattern(cls):
    assert len(cls.objectives) >= 2 and all(cls.objectives)
    assert len(cls.takeaway) == 3
    assert cls.prediction is not None and len(cls.prediction.choices) >= 2
    notes = cls.instructor
    assert notes.minutes > 0 and notes.timing and notes.misconceptions and notes.prompts
    fixed = [q for q in cls.questions if isinstance(q, Question)]
    measured = [q for q in cls.questions if isinstance(q, MeasuredQuestion)]
    assert len(fixed) >= 4 and len(measured) >= 1


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.slug)
def test_the_box_on_gpus_is_where_the_issue_asks(cls):
    page = cls()
    assert isinstance(getattr(page, "gpu_box", None), GpuBox) is (cls.slug in WITH_GPU_BOX)


def test_every_choice_explains_itself_and_distractors_are_of_similar_length():
    longest = 0
    for slug, q in FIXED:
        assert all(c.why for c in q.choices), (slug, q.prompt)
        others = [len(c.text) for c in q.choices if not c.correct]
        right = len(q.answer.text)
        assert right <= 1.3 * sum(others) / len(others), (slug, q.prompt)
        longest += right > max(others)
    assert longest <= len(FIXED) // 3  # the longest choice is no tell


@pytest.mark.parametrize("slug, question", FIXED, ids=[q.prompt[:40] for _, q in FIXED])
def test_the_key_reaches_every_position_and_stays_right(slug, question):
    positions = set()
    for seed in range(24):
        asked = CheckpointQuestion(question, seed)
        shown = [c.text for c in asked.shown]
        assert sorted(shown) == sorted(c.text for c in question.choices)
        position = shown.index(question.answer.text)
        positions.add(position)
        asked.answer = shown[position]
        assert asked.correct is True
    assert positions == set(range(len(question.choices)))


def test_no_figure_is_quoted_from_a_course_brief():
    for folder in ("lessons", "widgets", "engine"):
        for path in (ROOT / folder).rglob("*.py"):
            assert "content brief" not in path.read_text(), path


def test_one_heading_style_html_only():
    """Lesson prose is HTML: no Markdown heading in any module-level text of a lesson."""
    for info in LESSONS:
        module = importlib.import_module(info.view.partition(":")[0])
        for name, value in vars(module).items():
            if name.isupper() and isinstance(value, str):
                assert not re.search(r"^\s*#{1,6} ", value, re.M), (info.slug, name)
