"""The course map: what the course is, and a card per lesson saying what it measures."""

from __future__ import annotations

import html

from widgets.html import html_pane

from ..registry import LESSONS
from .template import page_url

INTRO = f"""
<h1>How fast is a language model, really?</h1>
<p>A chatbot's speed is not one number. You wait for the first word; then words arrive at some
rhythm; and the server answering you is answering many others at once. These lessons take that
apart with a small but real inference engine running on the machine that serves this page: every
chart is measured while you watch, not copied from a paper.</p>
<p>Each lesson has one live demo and ends with a few questions. Terms like TTFT and P99 are
defined on the <a href="{page_url("vocabulary")}">vocabulary</a> page; what this machine can do
(its memory bandwidth and compute peak) is on <a href="{page_url("about")}">about this
machine</a>.</p>
"""


def lesson_cards() -> str:
    cards = []
    for lesson in LESSONS:
        cards.append(
            f'<li><a class="card" href="{lesson.url}">'
            f'<span class="card-number">Lesson {lesson.number}</span>'
            f"<h2>{html.escape(lesson.title)}</h2>"
            f'<p><span class="card-measures">Measures</span><br>{html.escape(lesson.measures)}'
            f"</p></a></li>")
    return f'<ul class="cards">{"".join(cards)}</ul>'


def index_content() -> list:
    return [html_pane(INTRO), html_pane(lesson_cards())]
