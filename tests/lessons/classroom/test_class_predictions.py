"""The class's predictions on the teacher's console: a lesson's picks counted (a reader's latest
once) beside the measurement that decides them, and the class's anonymous aggregate as CSV."""

from __future__ import annotations

import csv
import io

import panel as pn
import pytest

from lessons.classroom.predictions import (
    aggregate_csv,
    aggregate_download,
    class_line,
    class_predictions_view,
)
from lessons.classroom.store import Store
from lessons.knob import KnobLesson
from lessons.roofline import RooflineLesson

KNOB = KnobLesson.prediction
ROOF = RooflineLesson.prediction


@pytest.fixture
def store(tmp_path):
    store = Store(tmp_path / "class.sqlite")
    yield store
    store.close()


def picks(store, lesson, question, *choices):
    for i, choice in enumerate(choices):
        store.record_prediction(f"r{i}", lesson, question.prompt, choice)


def test_the_view_counts_each_readers_latest_pick_beside_the_measurement(store):
    picks(store, "knob", KNOB, KNOB.choices[0], KNOB.choices[1], KNOB.choices[1])
    store.record_prediction("r0", "knob", KNOB.prompt, KNOB.choices[1])  # r0 picked again
    store.record_shown("r1", "knob", f"prediction: {KNOB.prompt}", choice=KNOB.choices[1],
                       detail="batch 8 gives 4.1x batch 1's tokens/s", device="cpu: Test CPU",
                       engine_version="0.6.0", cached=False,
                       measured_at="2026-12-02T10:00:00+0000")
    store.flush()
    view = class_predictions_view(store)
    root = pn.panel(view).get_root()
    assert list(view.sections) == ["knob"]  # only lessons the class has predicted
    bars, summary, measured = view.sections["knob"]
    assert bars.counts() == {KNOB.choices[0]: 0, KNOB.choices[1]: 3, KNOB.choices[2]: 0}
    assert "3 predicted" in summary.object and "3 of 3 predicted it" in summary.object
    assert KNOB.choices[1] in measured.object and "4.1x" in measured.object
    assert "measured live on cpu: Test CPU" in measured.object and "0.6.0" in measured.object

    picks(store, "roofline", ROOF, ROOF.choices[2])  # the class moves on: refresh in place
    store.record_prediction("r5", "knob", KNOB.prompt, KNOB.choices[2])
    store.flush()
    source = bars.source
    view.refresh()
    assert bars.source is source and bars.counts()[KNOB.choices[2]] == 1
    assert list(view.sections) == ["knob", "roofline"]
    assert "Not measured in this class yet" in view.sections["roofline"][1].object
    assert root is not None


def test_the_view_says_when_nothing_is_predicted_or_the_store_is_off(store, tmp_path):
    view = class_predictions_view(store)
    assert "No predictions yet" in view._status.object and view.sections == {}
    bad = tmp_path / "bad.sqlite"
    bad.write_bytes(b"garbage " * 500)
    off = class_predictions_view(Store(bad))
    assert "The class records are off" in off._status.object


def test_the_class_line_names_every_choice_in_order():
    assert class_line(("a", "b", "c"), {"b": 2, "a": 1}) == (
        "How the class predicted: a 1, b 2, c 0 (3 readers, you included).")
    assert class_line(("a", "b"), {"a": 1}) == "How the class predicted: a 1, b 0 (1 reader: you)."


def test_the_aggregate_is_counts_without_reader_ids(store):
    picks(store, "knob", KNOB, KNOB.choices[0], KNOB.choices[1], KNOB.choices[1])
    store.record_shown("r1", "knob", "prediction", choice=KNOB.choices[1], detail="4.1x")
    store.record_answer("r0", "knob", "Which doubling?", "4 to 8", True)
    store.record_answer("r1", "knob", "Which doubling?", "1 to 2", False)
    store.record_answer("r1", "knob", "Which doubling?", "4 to 8", True)  # changed their mind
    store.flush()
    text = aggregate_csv(store)
    assert "r0" not in text and "r1" not in text
    rows = list(csv.DictReader(io.StringIO(text)))
    assert [(r["record"], r["choice"], r["readers"], r["correct"], r["measured"])
            for r in rows] == [
        ("prediction", KNOB.choices[1], "2", "yes", KNOB.choices[1]),
        ("prediction", KNOB.choices[0], "1", "no", KNOB.choices[1]),
        ("answer", "4 to 8", "2", "yes", ""),
    ]  # by lesson, question, then choice ("3 to 6 ..." before "6 to 8 ...")
    assert {r["lesson"] for r in rows} == {"knob"}
    download = aggregate_download(store)
    assert download.filename == "class-aggregate.csv"
    assert download.callback().getvalue() == text
