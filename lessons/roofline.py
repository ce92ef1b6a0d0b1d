"""Lesson 5: Prefill versus decode, and the memory wall (roofline). /app?lesson=roofline

A placeholder until its lesson issue fills it: the page shows the lesson's title, what it will
measure, and the links around it (see lessons.base.LessonPage for what to override).
"""

from __future__ import annotations

from .base import LessonPage


class RooflineLesson(LessonPage):
    """Lesson 5 (placeholder)."""

    slug = "roofline"
