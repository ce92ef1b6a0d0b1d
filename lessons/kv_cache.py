"""Lesson 6: KV cache memory. /app?lesson=kv-cache

A placeholder until its lesson issue fills it: the page shows the lesson's title, what it will
measure, and the links around it (see lessons.base.LessonPage for what to override).
"""

from __future__ import annotations

from .base import LessonPage


class KVCacheLesson(LessonPage):
    """Lesson 6 (placeholder)."""

    slug = "kv-cache"
