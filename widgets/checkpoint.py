"""Checkpoint questions: multiple choice at the end of a lesson, with an explanation for every
answer, so a wrong pick teaches as much as a right one."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import panel as pn
import param


@dataclass(frozen=True)
class Choice:
    text: str
    correct: bool
    why: str  # shown once the reader picks this answer


@dataclass(frozen=True)
class Question:
    prompt: str
    choices: tuple[Choice, ...]

    def __post_init__(self) -> None:
        if sum(c.correct for c in self.choices) != 1:
            raise ValueError(f"question {self.prompt!r} needs exactly one correct choice")
        if len({c.text for c in self.choices}) != len(self.choices):
            raise ValueError(f"question {self.prompt!r} has two choices with the same text")


class CheckpointQuestion(pn.viewable.Viewer):
    """One question: pick an answer, read why it is right or not."""

    answer = param.Selector(default=None, allow_None=True, objects=[], doc="""
        The text of the choice the reader picked; None until they pick one.""")

    def __init__(self, question: Question, **params):
        super().__init__(**params)
        self.question = question
        self.param.answer.objects = [c.text for c in question.choices]
        self._choices = {c.text: c for c in question.choices}
        self._picker = pn.widgets.RadioBoxGroup.from_param(
            self.param.answer, inline=False, sizing_mode="stretch_width")
        self._picker.value = None  # from_param preselects the first choice; nothing is picked yet
        self._feedback = pn.pane.Alert("", visible=False, sizing_mode="stretch_width")
        self._layout = pn.Column(
            pn.pane.Markdown(f"**{question.prompt}**", sizing_mode="stretch_width"),
            self._picker, self._feedback, sizing_mode="stretch_width",
            css_classes=["checkpoint-question"],
        )

    @property
    def correct(self) -> bool | None:
        """Whether the picked answer is right; None before any pick."""
        return None if self.answer is None else self._choices[self.answer].correct

    @property
    def feedback(self) -> str:
        """The text shown under the question ("" before any pick)."""
        return self._feedback.object if self._feedback.visible else ""

    @param.depends("answer", watch=True)
    def _show_feedback(self) -> None:
        if self.answer is None:
            self._feedback.param.update(object="", visible=False)
            return
        choice = self._choices[self.answer]
        verdict = "Right." if choice.correct else "Not quite."
        self._feedback.param.update(
            object=f"{verdict} {choice.why}", visible=True,
            alert_type="success" if choice.correct else "warning",
        )

    def __panel__(self):
        return self._layout


class Checkpoint(pn.viewable.Viewer):
    """A lesson's checkpoint: a few questions and a running count of right answers."""

    right = param.Integer(default=0, bounds=(0, None), constant=True,
                          doc="How many questions the reader has answered correctly.")

    def __init__(self, questions: Sequence[Question], title: str = "Checkpoint", **params):
        super().__init__(**params)
        self.questions = [CheckpointQuestion(q) for q in questions]
        for q in self.questions:
            q.param.watch(self._count, "answer")
        self._score = pn.pane.Markdown(self._score_text(), sizing_mode="stretch_width")
        self._layout = pn.Column(
            pn.pane.Markdown(f"## {title}", sizing_mode="stretch_width"),
            *self.questions, self._score, sizing_mode="stretch_width",
            css_classes=["checkpoint"], visible=bool(self.questions),
        )

    def _score_text(self) -> str:
        answered = sum(q.answer is not None for q in self.questions)
        return (f"{self.right} of {len(self.questions)} right"
                + (f" ({answered} answered)" if answered < len(self.questions) else ""))

    def _count(self, *_events) -> None:
        with param.edit_constant(self):
            self.right = sum(bool(q.correct) for q in self.questions)
        self._score.object = self._score_text()

    def __panel__(self):
        return self._layout
