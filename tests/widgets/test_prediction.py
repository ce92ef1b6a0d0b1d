"""The prediction box: nothing is made until the reader picks or skips; a pick is locked and
compared with what the measurement supports; a result revealed first stays hidden until then."""

from __future__ import annotations

import panel as pn
import pytest

from widgets.prediction import PredictionBox, PredictionQuestion

QUESTION = PredictionQuestion("Which clock will a long document move?",
                              ("The first token's", "The gaps'", "Both"))


def built() -> PredictionBox:
    box = PredictionBox(QUESTION)
    pn.panel(box).get_root()
    return box


def test_nothing_is_predicted_at_first():
    box = built()
    assert box.choice is None and not box.made and box.verdict == ""
    assert box._picker.value is None and not box._picker.disabled


def test_a_pick_opens_the_gate_and_is_locked():
    box = built()
    opened = []
    box.param.watch(lambda e: opened.append(e.new), "made")
    box._picker.value = "The gaps'"
    assert box.made and opened == [True]
    box._picker.value = "Both"  # a second pick is undone: the first is what gets compared
    assert box.choice == "The gaps'" and box._picker.value == "The gaps'"
    box.reveal("The first token's", "TTFT 840 ms, gaps 31 ms")
    assert box.verdict.startswith("Not what you predicted.")
    assert "You predicted: The gaps'. Measured: The first token's (TTFT 840 ms" in box.verdict


def test_a_right_prediction_says_so():
    box = built()
    box.choice = "Both"
    box.reveal("Both", "numbers")
    assert box.verdict.startswith("As you predicted.")
    assert box.outcome == "right" and "prediction-result right" in box._result.object


def test_skipping_measures_without_a_prediction():
    box = built()
    box.skip()
    assert box.made and box.skipped and box.choice is None
    box.reveal("Both", "numbers")
    assert box.verdict == "Measured: Both (numbers)."


def test_a_result_revealed_first_stays_hidden_until_the_reader_predicts():
    box = built()
    box.reveal("Both", "numbers")
    assert not box.made and box.verdict == "" and not box._result.visible
    assert "numbers" not in box._result.object
    box.choice = "Both"
    assert box.made and box.verdict.startswith("As you predicted.")


def test_a_result_revealed_first_shows_once_the_reader_skips():
    box = built()
    box.reveal("Both", "numbers")
    box.skip()
    assert box.verdict == "Measured: Both (numbers)."


def test_the_measurement_must_be_one_of_the_choices():
    with pytest.raises(ValueError):
        built().reveal("Neither", "")
    with pytest.raises(ValueError):
        PredictionQuestion("?", ("one",))
