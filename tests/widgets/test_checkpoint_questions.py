"""Checkpoint questions: picking an answer shows why it is right or wrong; the score counts;
choices are shuffled per reader (seeded) with the key still right; a question on the reader's
own numbers waits for the page's measurement."""

from __future__ import annotations

import panel as pn
import pytest
from bokeh.models import RadioGroup

from widgets.checkpoint import (
    Checkpoint,
    CheckpointQuestion,
    Choice,
    MeasuredQuestion,
    Question,
    choice_order,
    numeric_question,
)

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
    assert radio(model).labels == [c.text for c in q.shown]
    assert sorted(radio(model).labels) == ["ITL", "TTFT"]


@pytest.mark.parametrize("answer, correct, verdict", [("TTFT", True, "Right."),
                                                     ("ITL", False, "Not quite.")])
def test_each_answer_explains_itself(answer, correct, verdict):
    q = CheckpointQuestion(QUESTION)
    model = root(q)
    q.answer = answer
    why = next(c.why for c in QUESTION.choices if c.text == answer)
    assert q.correct is correct
    assert q.feedback == f"{verdict} {why}"
    assert radio(model).active == [c.text for c in q.shown].index(answer)


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


THREE = Question("Where does the mean of a right-skewed latency sit?", (
    Choice("Above the median", True, "The slow tail pulls it up."),
    Choice("On the median", False, "Only for a symmetric spread."),
    Choice("Below the median", False, "Slow outliers push it up, not down."),
))


def test_the_order_is_seeded_by_the_reader_and_the_question():
    assert choice_order(THREE, 7) == choice_order(THREE, 7)  # a reload keeps the order
    assert sorted(choice_order(THREE, 7)) == [0, 1, 2]
    orders = {choice_order(THREE, seed) for seed in range(40)}
    assert len(orders) == 6  # every permutation of three choices occurs for some reader
    # two questions of one reader are shuffled independently
    assert any(choice_order(THREE, s) != choice_order(OTHER_THREE, s) for s in range(10))


OTHER_THREE = Question("Which clock does a longer prompt move?", (
    Choice("TTFT", True, "Prefill."), Choice("ITL", False, "Decode."),
    Choice("Neither", False, "Prefill reads the whole prompt."),
))


@pytest.mark.parametrize("seed", range(12))
def test_the_key_stays_right_wherever_it_is_shown(seed):
    q = CheckpointQuestion(THREE, seed)
    model = root(q)
    labels = radio(model).labels
    position = labels.index("Above the median")
    q._picker.value = labels[position]
    assert q.correct is True and q.feedback.startswith("Right.")
    wrong = next(i for i, label in enumerate(labels) if i != position)
    q._picker.value = labels[wrong]
    assert q.correct is False and q.feedback.startswith("Not quite.")


def test_the_right_answer_reaches_every_position_over_seeds():
    positions = {CheckpointQuestion(THREE, s).order.index(0) for s in range(30)}
    assert positions == {0, 1, 2}


def test_a_measured_question_waits_for_the_measurement():
    cp = Checkpoint([QUESTION, MeasuredQuestion("yours", "Measure first.")], seed=3)
    model = root(cp)
    assert len(cp.questions) == 1
    assert cp._score.object == "0 of 2 right (0 answered)"
    assert any("Measure first." in str(getattr(m, "text", "")) for m in model.references())
    cp.provide("yours", THREE)
    assert [q.question for q in cp.questions] == [QUESTION, THREE]
    cp.questions[1].answer = "Above the median"
    assert cp.right == 1
    cp.provide("yours", THREE)  # the same measurement again: the answer stays
    assert cp.questions[1].answer == "Above the median" and cp.right == 1
    cp.provide("yours", OTHER_THREE)  # a new measurement: a new question, not answered yet
    assert cp.questions[1].answer is None and cp.right == 0


def test_a_numeric_question_drops_slips_that_land_on_the_answer():
    q = numeric_question("E2E?", ("2,200 ms", "right"),
                         [("2,220 ms", "N gaps"), ("2,200 ms", "a slip, same number"),
                          ("2,220 ms", "another slip, same number"), ("2,000 ms", "no TTFT")])
    assert [c.text for c in q.choices] == ["2,200 ms", "2,220 ms", "2,000 ms"]
    assert q.answer.text == "2,200 ms" and q.answer.why == "right"


def test_the_verdict_box_is_built_at_the_first_pick():
    """A hidden pane costs a page build as much as a shown one (its models made and sent to
    every reader of a class arriving at once): the question's box for the verdict is not in its
    layout until the reader picks, then stays, emptied and hidden if the pick is taken back."""
    q = CheckpointQuestion(QUESTION)
    model = root(q)
    assert len(model.children) == 2  # the prompt and the choices
    q._picker.value = "ITL"
    assert len(model.children) == 3 and q.feedback.startswith("Not quite.")
    verdict = model.children[2]
    assert "Not quite." in verdict.text
    q.answer = "TTFT"
    assert model.children[2] is verdict and "Right." in verdict.text
    q.answer = None
    assert q.feedback == "" and not verdict.visible


def test_a_measured_question_takes_its_waiting_line_place():
    """Questions sit in the checkpoint's own layout, no wrapper each: a measured one replaces
    its waiting line where it stood, between the questions before and after it."""
    cp = Checkpoint([QUESTION, MeasuredQuestion("yours", "Measure first."), OTHER])
    model = root(cp)
    texts = [str(getattr(child, "text", "")) for child in model.children]
    assert "Measure first." in texts[2]
    cp.provide("yours", THREE)
    assert "Measure first." not in str(getattr(model.children[2], "text", ""))
    assert radio(model.children[2]).labels == [c.text for c in cp.questions[1].shown]
    assert sorted(radio(model.children[3]).labels) == sorted(c.text for c in OTHER.choices)
