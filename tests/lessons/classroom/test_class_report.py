"""What lesson pages record for a reader (their pick, the results drawn, the measurement put
beside the pick, their answers), the "How the class predicted" line (hidden before the pick,
shown after), and the report of a reader who did two lessons, as Markdown and JSON. Pages are
built without a browser; the knob's points run for real on the tiny model in this process."""

from __future__ import annotations

import json

import panel as pn
import pytest
from lesson_stubs import DEVICE, WHEN, attach

from lessons.classroom.report import report_content, report_data, report_json, report_markdown
from lessons.classroom.store import Store
from lessons.knob import KnobLesson
from lessons.three_schedules import ThreeSchedulesLesson

SMALL = {"preset": [b"tiny"], "prompt_len": [b"16"], "new_tokens": [b"8"]}


@pytest.fixture
def store(tmp_path):
    store = Store(tmp_path / "class.sqlite")
    yield store
    store.close()


def as_reader(page, store, reader="r1"):
    """The page served to the browser whose cookie id is `reader` (outside a server a page has
    no reader and records nothing)."""
    page.recorder.reader, page.recorder.store = reader, store
    return page


def texts(root) -> str:
    """Every HTML pane's text in a Bokeh model tree (what the browser would get)."""
    from bokeh.models import Markup
    return "\n".join(m.text for m in root.select({"type": Markup}))


def test_a_page_outside_a_server_records_nothing(store):
    page = KnobLesson.from_url(SMALL)
    assert page.recorder.reader is None
    page.recorder.store = store
    attach(page, predict=True)
    page.prediction_box.choice = page.prediction.choices[0]
    page.checkpoint.questions[0].answer = page.checkpoint.questions[0].shown[0].text
    store.flush()
    assert store.predictions() == store.answers() == [] and page.prediction_box.note_text == ""


def test_the_class_line_shows_only_after_the_readers_pick(store):
    for reader, pick in (("r7", 0), ("r8", 1), ("r9", 1)):
        store.record_prediction(reader, "knob", KnobLesson.prediction.prompt,
                                KnobLesson.prediction.choices[pick])
    page = as_reader(KnobLesson.from_url(SMALL), store)
    attach(page, predict=True)
    root = pn.panel(page).get_root()
    assert "How the class predicted" not in texts(root) and page.prediction_box.note_text == ""
    page.prediction_box.choice = page.prediction.choices[0]
    line = ("How the class predicted: 6 to 8 times as many 2, 3 to 6 times as many 2, "
            "Under 3 times as many 0 (4 readers, you included).")
    assert page.prediction_box.note_text == line
    assert line in texts(root)
    page.prediction_box.choice = page.prediction.choices[2]  # the box keeps the first pick
    store.flush()
    assert [p["pick"] for p in store.predictions("r1")] == [page.prediction.choices[0]]


def test_the_report_of_a_reader_who_did_two_lessons(store):
    # lesson 4: predict, measure batch 1, 4 and 8 for real, answer a question
    knob = as_reader(KnobLesson.from_url({**SMALL, "batch_size": [b"8"]}), store)
    service = attach(knob, predict=True)
    service.status = lambda: {"engine_version": "0.6.0"}  # what the service's status says
    pn.panel(knob).get_root()
    knob.prediction_box.choice = "3 to 6 times as many"
    for job in [j for j in service.submitted if j.kind == "sweep_point"]:
        service.run_for_real(job, cached=job.params["batch_size"] == 4)
    assert knob.prediction_box.measured is not None  # batch 1 against 8: the box has its answer
    first = knob.checkpoint.questions[0]
    right = next(c.text for c in first.shown if c.correct)
    first.answer = right
    # lesson 3: predict and answer (a wrong pick)
    schedules = as_reader(ThreeSchedulesLesson.from_url({}), store)
    attach(schedules, predict=True)
    pn.panel(schedules).get_root()
    schedules.prediction_box.choice = schedules.prediction.choices[1]
    q = schedules.checkpoint.questions[0]
    wrong = next(c.text for c in q.shown if not c.correct)
    q.answer = wrong
    store.record_prediction("r2", "knob", knob.prediction.prompt, "Under 3 times as many")
    store.flush()

    data = report_data("r1", store)
    assert [(e["number"], e["lesson"]) for e in data["lessons"]] == [(3, "three-schedules"),
                                                                    (4, "knob")]
    sched, kn = data["lessons"]
    assert [p["pick"] for p in sched["predictions"]] == [schedules.prediction.choices[1]]
    assert [(a["answer"], a["correct"]) for a in sched["answers"]] == [(wrong, False)]
    assert [p["pick"] for p in kn["predictions"]] == ["3 to 6 times as many"]
    assert [(a["question"], a["answer"], a["correct"]) for a in kn["answers"]] == [
        (first.question.prompt, right, True)]
    points = [s for s in kn["shown"] if s["what"].startswith("sweep_point")]
    assert len(points) == 3
    for s in points:
        assert s["unit"] == "ms" and s["n"] > 0 and s["low"] <= s["value"] <= s["high"]
        assert (s["device"], s["engine_version"], s["measured_at"]) == (DEVICE, "0.6.0", WHEN)
        assert "batch_size=" in s["detail"] and "preset=tiny" in s["detail"]
    assert [s["cached"] for s in points] == ["batch_size=4," in s["detail"] for s in points]
    [verdict] = [s for s in kn["shown"] if s["choice"]]
    assert verdict["choice"] == knob.prediction_box.measured
    assert verdict["detail"] == knob.prediction_box.detail
    assert all(p["pick"] != "Under 3 times as many" for p in kn["predictions"])  # r2's

    assert json.loads(report_json(data)) == data
    md = report_markdown(data)
    assert md.index("## Lesson 3:") < md.index("## Lesson 4:")
    assert f"| {knob.prediction.prompt} | 3 to 6 times as many |" in md
    assert f"| {right} | yes |" in md and f"| {wrong} | no |" in md
    s = points[0]
    assert (f"{s['value']:.4g} ms (n = {s['n']}, p10\u2013p90 {s['low']:.4g}\u2013"
            f"{s['high']:.4g} ms)") in md
    assert f"| {DEVICE} | 0.6.0 | {'cached' if s['cached'] else 'fresh'}, measured {WHEN} |" in md
    assert "| cached, measured" in md and "| fresh, measured" in md

    body = texts(pn.Column(*report_content("r1", store)).get_root())
    assert "Lesson 4: " in body and "3 to 6 times as many" in body and DEVICE in body


def test_the_report_page_says_once_when_the_store_is_off(tmp_path):
    bad = tmp_path / "class.sqlite"
    bad.write_bytes(b"not a database " * 300)
    store = Store(bad)
    parts = report_content("r1", store)
    body = texts(pn.Column(*parts).get_root())
    assert body.count("The class records are off") == 1
    assert "Nothing recorded yet" in body
    assert "The class records are off" in report_markdown(report_data("r1", store))


def test_the_router_serves_the_report_page():
    from lessons.shell.router import PAGES, choose
    content, title, current = choose({"page": [b"report"]})
    assert "report" in PAGES and (title, current) == ("My course report", "report")
    body = texts(pn.Column(*content).get_root())
    assert "My course report" in body and "here there is none" in body  # no server, no reader
