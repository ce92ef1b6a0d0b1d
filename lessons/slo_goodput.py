"""Lesson 8: SLOs, goodput and cost. /app?lesson=slo-goodput

A placeholder until its lesson issue fills it: the page shows the lesson's title, what it will
measure, and the links around it (see lessons.base.LessonPage for what to override).
"""

from __future__ import annotations

from .base import LessonPage


class SLOGoodputLesson(LessonPage):
    """Lesson 8 (placeholder)."""

    slug = "slo-goodput"
