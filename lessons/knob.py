"""Lesson 4: The knob (batch size). /app?lesson=knob

A placeholder until its lesson issue fills it: the page shows the lesson's title, what it will
measure, and the links around it (see lessons.base.LessonPage for what to override).
"""

from __future__ import annotations

from .base import LessonPage


class KnobLesson(LessonPage):
    """Lesson 4 (placeholder)."""

    slug = "knob"
