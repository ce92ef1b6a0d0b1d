"""Checkpoint questions: picking an answer shows why it is right or wrong; the score counts."""

from __future__ import annotations

import panel as pn
import pytest
from bokeh.models import RadioGroup

from widgets.checkpoint import Checkpoint, CheckpointQuestion, Choice, Question

PROMPT = "Which clock does a longer prompt move?"
QUESTION = Question(PROMPT, (
    Choice("TTFT", True, "Prefill reads the whole prompt before the first token."),
    Choice("ITL", False, "Decode steps do not reread the prompt; the KV cache holds it."),
))
OTHER = Question("Why batch?", (
    Choice("One weight read serves many tokens", True, "Decode is memory-bound."),
    Choice("It makes each token faster", False, "Each user's time per token rises."),
))


def root(viewer):
    """The Bokeh model a Viewer renders to, built without a server."""
    return pn.panel(viewer).get_root()


def radio(model) -> RadioGroup:
    return next(m for m in model.select({"type": RadioGroup}))


def test_nothing_is_picked_at_first():
    q = CheckpointQuestion(QUESTION)
    model = root(q)
    assert q.answer is None and q.correct is None and q.feedback == ""
    assert radio(model).active is None
    assert radio(model).labels == ["TTFT", "ITL"]


@pytest.mark.parametrize("answer, correct, verdict", [("TTFT", True, "Right."),
                                                     ("ITL", False, "Not quite.")])
def test_each_answer_explains_itself(answer, correct, verdict):
    q = CheckpointQuestion(QUESTION)
    model = root(q)
    q.answer = answer
    why = next(c.why for c in QUESTION.choices if c.text == answer)
    assert q.correct is correct
    assert q.feedback == f"{verdict} {why}"
    assert radio(model).active == ["TTFT", "ITL"].index(answer)


def test_picking_in_the_widget_sets_the_answer():
    q = CheckpointQuestion(QUESTION)
    q._picker.value = "ITL"
    assert q.answer == "ITL" and q.correct is False


def test_checkpoint_counts_right_answers():
    cp = Checkpoint([QUESTION, OTHER])
    root(cp)
    assert cp.right == 0
    cp.questions[0].answer = "TTFT"
    cp.questions[1].answer = "It makes each token faster"
    assert cp.right == 1
    assert cp._score.object == "1 of 2 right"
    cp.questions[1].answer = "One weight read serves many tokens"
    assert cp.right == 2


def test_a_question_needs_exactly_one_right_answer():
    with pytest.raises(ValueError):
        Question("?", (Choice("a", True, ""), Choice("b", True, "")))
    with pytest.raises(ValueError):
        Question("?", (Choice("a", False, ""),))
