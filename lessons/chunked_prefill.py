"""Lesson 7: Chunked prefill. /app?lesson=chunked-prefill

A placeholder until its lesson issue fills it: the page shows the lesson's title, what it will
measure, and the links around it (see lessons.base.LessonPage for what to override).
"""

from __future__ import annotations

from .base import LessonPage


class ChunkedPrefillLesson(LessonPage):
    """Lesson 7 (placeholder)."""

    slug = "chunked-prefill"
