"""The shapes of a lesson's words that widgets draw: checkpoint questions and the prediction.

Plain dataclasses with no Panel import, so that a lesson's words module (lessons/words/) can be
read, reviewed and tested without loading the page's view code. widgets.checkpoint and
widgets.prediction draw them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


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

    @property
    def answer(self) -> Choice:
        """The right choice."""
        return next(c for c in self.choices if c.correct)


@dataclass(frozen=True)
class MeasuredQuestion:
    """A slot for a question on the reader's own measurement. Until the lesson provides the
    question (Checkpoint.provide(key, question)), the slot says what to measure first."""

    key: str
    waiting: str  # e.g. "Measure a few batch sizes above, and a question on your curve appears."


def numeric_question(prompt: str, right: tuple[str, str],
                     wrong: Sequence[tuple[str, str]]) -> Question:
    """A question on the reader's own numbers: `right` is (text, why) of the measured figure,
    `wrong` the figures the usual slips give. A slip that lands on the same text as the right
    figure, or as another slip, is left out (different mistakes can give the same number)."""
    seen = {right[0]}
    choices = [Choice(right[0], True, right[1])]
    for text, why in wrong:
        if text not in seen:
            seen.add(text)
            choices.append(Choice(text, False, why))
    return Question(prompt, tuple(choices))


@dataclass(frozen=True)
class PredictionQuestion:
    prompt: str
    choices: tuple[str, ...]
    intro: str = "Before the engine measures anything, what do you expect?"

    def __post_init__(self) -> None:
        if len(set(self.choices)) != len(self.choices) or len(self.choices) < 2:
            raise ValueError(f"prediction {self.prompt!r} needs two or more distinct choices")
