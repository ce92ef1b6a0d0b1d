"""Checkpoint questions: multiple choice at the end of a lesson, with an explanation for every
answer, so a wrong pick teaches as much as a right one.

Choices are shown in an order shuffled per reader: `choice_order(question, seed)` is a
permutation drawn from the reader's seed and the question's prompt, so a reload (same seed)
keeps the order, another reader (another seed) gets another, and the right answer can sit in any
position. Correctness goes with the choice, never with its position.

A question on the reader's own numbers is a `MeasuredQuestion` slot: it shows what to measure
first, and the lesson `provide`s the real Question (built from its measurement, so the key is
the page's own number) once it has one; a new measurement provides a new question.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

import panel as pn
import param

from .a11y import AriaMarkdown, AriaRadioBoxGroup, LiveRegion, unique_id
from .content import (  # noqa: F401  (Choice, numeric_question: re-exported for lessons)
    Choice,
    MeasuredQuestion,
    Question,
    numeric_question,
)
from .site_css import site_stylesheets


def choice_order(question: Question, seed: int) -> tuple[int, ...]:
    """The order to show the question's choices in: a permutation of their indices drawn from
    the reader's seed and the prompt (a string seed: the same on every run and machine)."""
    order = list(range(len(question.choices)))
    random.Random(f"{seed}|{question.prompt}").shuffle(order)
    return tuple(order)


def _heading(text: str, level: int = 3) -> pn.pane.HTML:
    return pn.pane.HTML(f'<div class="site"><h{level}>{text}</h{level}></div>',
                        sizing_mode="stretch_width", stylesheets=site_stylesheets())


class CheckpointQuestion(pn.viewable.Viewer):
    """One question: pick an answer, read why it is right or not."""

    answer = param.Selector(default=None, allow_None=True, objects=[], doc="""
        The text of the choice the reader picked; None until they pick one.""")

    def __init__(self, question: Question, seed: int = 0, **params):
        super().__init__(**params)
        self.question = question
        self.order = choice_order(question, seed)
        self.shown = [question.choices[i] for i in self.order]  # the choices, as displayed
        self.param.answer.objects = [c.text for c in self.shown]
        self._choices = {c.text: c for c in question.choices}
        # the prompt names the group of choices (aria-labelledby: both in this one layout)
        prompt = AriaMarkdown(f"**{question.prompt}**", html_id=unique_id("question"),
                              sizing_mode="stretch_width")
        self._picker = AriaRadioBoxGroup.from_param(
            self.param.answer, inline=False, sizing_mode="stretch_width",
            html_attributes={"role": "radiogroup", "aria-labelledby": prompt.html_id})
        self._picker.value = None  # from_param preselects the first choice; nothing is picked yet
        # The verdict's box is built at the first pick, not with the page: a hidden pane costs a
        # page build as much as a shown one (its Bokeh models made and sent to every reader), and
        # a class's pages are built all at once on the web server's one core (bench/web/page_build.py).
        self._feedback: pn.pane.Alert | None = None
        self._layout = pn.Column(
            prompt, self._picker, sizing_mode="stretch_width", css_classes=["checkpoint-question"],
        )

    @property
    def correct(self) -> bool | None:
        """Whether the picked answer is right; None before any pick."""
        return None if self.answer is None else self._choices[self.answer].correct

    @property
    def feedback(self) -> str:
        """The text shown under the question ("" before any pick)."""
        shown = self._feedback is not None and self._feedback.visible
        return self._feedback.object if shown else ""

    @param.depends("answer", watch=True)
    def _show_feedback(self) -> None:
        if self.answer is None:
            if self._feedback is not None:
                self._feedback.param.update(object="", visible=False)
            return
        if self._feedback is None:
            self._feedback = pn.pane.Alert("", sizing_mode="stretch_width")
            self._layout.append(self._feedback)
        choice = self._choices[self.answer]
        verdict = "Right." if choice.correct else "Not quite."
        self._feedback.param.update(
            object=f"{verdict} {choice.why}", visible=True,
            alert_type="success" if choice.correct else "danger",  # warning's text is 3.9:1
        )

    def __panel__(self):
        return self._layout


class Checkpoint(pn.viewable.Viewer):
    """A lesson's checkpoint: a few questions (some on the reader's own numbers) and a running
    count of right answers."""

    right = param.Integer(default=0, bounds=(0, None), constant=True,
                          doc="How many questions the reader has answered correctly.")

    def __init__(self, questions: Sequence[Question | MeasuredQuestion], seed: int = 0,
                 title: str = "Checkpoint", **params):
        super().__init__(**params)
        self.seed = seed
        # each question (or a measured one's waiting line) straight in the layout, at 1 + its
        # index: no wrapper per question, one Bokeh model less each on every lesson page
        slots: list = []
        self._asked: list[CheckpointQuestion | None] = []  # None: a measured one not yet given
        self._keys: dict[str, int] = {}
        for i, q in enumerate(questions):
            if isinstance(q, MeasuredQuestion):
                self._keys[q.key] = i
                self._asked.append(None)
                slots.append(pn.pane.Markdown(f"*{q.waiting}*", sizing_mode="stretch_width",
                                              css_classes=["checkpoint-waiting"]))
            else:
                asked = self._ask(q)
                self._asked.append(asked)
                slots.append(asked)
        self._score = pn.pane.Markdown(self._score_text(), sizing_mode="stretch_width")
        self.live = LiveRegion()  # reads out the verdict of each answer and the score
        # called with the CheckpointQuestion the reader has just answered (or changed)
        self.answer_listeners: list = []
        self._layout = pn.Column(
            _heading(title, 2), *slots, self._score, self.live, sizing_mode="stretch_width",
            css_classes=["checkpoint"], visible=bool(slots),
        )

    @property
    def questions(self) -> list[CheckpointQuestion]:
        """The questions asked so far (a measured one appears once provided)."""
        return [q for q in self._asked if q is not None]

    def _ask(self, question: Question) -> CheckpointQuestion:
        asked = CheckpointQuestion(question, self.seed)
        asked.param.watch(self._count, "answer")
        return asked

    def provide(self, key: str, question: Question) -> None:
        """Ask the measured question `key`, built from the page's measurement. A new
        measurement gives a new question (and a fresh pick); the same question again keeps the
        reader's answer."""
        i = self._keys[key]
        current = self._asked[i]
        if current is not None and current.question == question:
            return
        self._asked[i] = self._ask(question)
        self._layout[1 + i] = self._asked[i]  # after the heading
        self._count()

    def _score_text(self) -> str:
        total = len(self._asked)
        answered = sum(q.answer is not None for q in self.questions)
        return (f"{self.right} of {total} right"
                + (f" ({answered} answered)" if answered < total else ""))

    def _count(self, *events) -> None:
        with param.edit_constant(self):
            self.right = sum(bool(q.correct) for q in self.questions)
        self._score.object = self._score_text()
        answered = [e.obj for e in events if getattr(e, "name", "") == "answer"]
        for asked in answered:
            if asked.answer is not None:
                for listener in self.answer_listeners:
                    listener(asked)
        if answered and answered[-1].feedback:
            self.live.announce(f"{answered[-1].feedback} {self._score_text()}.")

    def __panel__(self):
        return self._layout
