"""Lesson 2: The average lies (tail latency). /app?lesson=average-lies

A placeholder until its lesson issue fills it: the page shows the lesson's title, what it will
measure, and the links around it (see lessons.base.LessonPage for what to override).
"""

from __future__ import annotations

from .base import LessonPage


class AverageLiesLesson(LessonPage):
    """Lesson 2 (placeholder)."""

    slug = "average-lies"
