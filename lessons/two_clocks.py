"""Lesson 1: Two clocks (TTFT and ITL). /app?lesson=two-clocks

A placeholder until its lesson issue fills it: the page shows the lesson's title, what it will
measure, and the links around it (see lessons.base.LessonPage for what to override).
"""

from __future__ import annotations

from .base import LessonPage


class TwoClocksLesson(LessonPage):
    """Lesson 1 (placeholder)."""

    slug = "two-clocks"
