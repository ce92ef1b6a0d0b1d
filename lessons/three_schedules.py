"""Lesson 3: Three schedules (static, dynamic, continuous batching). /app?lesson=three-schedules

A placeholder until its lesson issue fills it: the page shows the lesson's title, what it will
measure, and the links around it (see lessons.base.LessonPage for what to override).
"""

from __future__ import annotations

from .base import LessonPage


class ThreeSchedulesLesson(LessonPage):
    """Lesson 3 (placeholder)."""

    slug = "three-schedules"
