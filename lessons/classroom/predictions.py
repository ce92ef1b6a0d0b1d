"""The class's predictions beside what was measured, for the teacher's console, and the class's
anonymous aggregate as CSV.

    class_predictions_view()   # per lesson: the class's picks as bars (readers per choice),
                               # the measurement that decides the prediction, a summary line
    aggregate_csv()            # every lesson's picks and answers counted: no reader ids
    aggregate_download()       # a button for the console (behind the teacher's key)

A reader's latest pick of a lesson's prediction counts once. The measurement beside it is the
latest one a page put beside a prediction (lessons.classroom.recording), with its device, engine
version, whether it was cached, and when it was measured.
"""

from __future__ import annotations

import csv
import html
import io
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import panel as pn

from widgets.count_bars import CountBars
from widgets.html import html_pane, site_html
from widgets.job_status import describe_measurement

from ..registry import LESSONS, lesson_class
from .store import Store, get_store

AGGREGATE_COLUMNS = ("lesson", "record", "question", "choice", "readers", "correct", "measured")


def class_line(choices: Sequence[str], counts: Mapping[str, int]) -> str:
    """'How the class predicted: 3 to 6 times 12, 6 to 8 times 5, under 3 times 2 (19 readers,
    you included).' Every choice, in the question's order."""
    total = sum(counts.get(c, 0) for c in choices)
    parts = ", ".join(f"{c} {counts.get(c, 0)}" for c in choices)
    readers = "1 reader: you" if total == 1 else f"{total} readers, you included"
    return f"How the class predicted: {parts} ({readers})."


@dataclass(frozen=True)
class LessonTally:
    """One lesson's prediction as the class made it, and what was measured."""

    slug: str
    number: int
    title: str
    prompt: str
    choices: tuple[str, ...]
    counts: dict[str, int]
    measured: dict | None  # the store's shown row that decides it, or None

    @property
    def readers(self) -> int:
        return sum(self.counts.values())

    def summary(self) -> str:
        """The chart in a sentence: how many predicted, what was measured, how many had it."""
        picks = "; ".join(f"{c}: {self.counts.get(c, 0)}" for c in self.choices)
        text = f"{self.readers} predicted ({picks})."
        if self.measured is None:
            return text + " Not measured in this class yet."
        right = self.counts.get(self.measured["choice"], 0)
        return (text + f" Measured: {self.measured['choice']}; {right} of {self.readers} "
                "predicted it.")


def predicted_lessons() -> list[tuple]:
    """(LessonInfo, PredictionQuestion) of every lesson that asks for a prediction."""
    out = []
    for info in LESSONS:
        question = getattr(lesson_class(info), "prediction", None)
        if question is not None:
            out.append((info, question))
    return out


def tallies(store: Store | None = None, everyone: bool = False) -> list[LessonTally]:
    """The lessons the class has predicted (every predicting lesson with `everyone`)."""
    store = store if store is not None else get_store()
    out = []
    for info, question in predicted_lessons():
        counts = store.pick_counts(info.slug, question.prompt)
        if counts or everyone:
            out.append(LessonTally(info.slug, info.number, info.title, question.prompt,
                                   tuple(question.choices), counts, store.deciding(info.slug)))
    return out


def measured_html(tally: LessonTally) -> str:
    row = tally.measured
    if row is None:
        return "<p><strong>Measured:</strong> not yet in this class.</p>"
    where = describe_measurement(row["cached"], row["device"], row["measured_at"])
    version = f", engine {html.escape(row['engine_version'])}" if row["engine_version"] else ""
    return (f"<p><strong>Measured:</strong> {html.escape(row['choice'])}</p>"
            f"<p>{html.escape(row['detail'])}</p>"
            f'<p class="provenance">{html.escape(where)}{version}</p>')


class ClassPredictions(pn.viewable.Viewer):
    """Per lesson, the class's picks as bars beside the deciding measurement; `refresh()`
    (or its button) reads the store again and updates the charts in place."""

    def __init__(self, store: Store | None = None, **params):
        super().__init__(**params)
        self._store = store
        self.sections: dict[str, tuple[CountBars, pn.pane.HTML, pn.pane.HTML]] = {}
        self._status = html_pane("")
        refresh = pn.widgets.Button(label="Refresh the class's predictions", width=260)
        refresh.on_click(lambda _e: self.refresh())
        self._sections = pn.Column(sizing_mode="stretch_width")
        self._layout = pn.Column(
            html_pane("<h2>How the class predicted</h2><p>Each lesson's prediction: how many "
                      "readers picked each choice (their latest pick), beside what the engine "
                      "measured.</p>"),
            refresh, self._status, self._sections, sizing_mode="stretch_width",
            css_classes=["class-predictions"])
        self.refresh()

    @property
    def store(self) -> Store:
        return self._store if self._store is not None else get_store()

    def refresh(self) -> None:
        store = self.store
        found = tallies(store)
        if store.error:
            self._status.object = site_html(f'<p class="error">{html.escape(store.error)}</p>')
        elif not found:
            self._status.object = site_html("<p>No predictions yet: they appear here as "
                                            "readers pick.</p>")
        else:
            self._status.object = site_html("")
        for tally in found:
            if tally.slug not in self.sections:
                bars = CountBars(unit="readers", title=f"Lesson {tally.number}: {tally.title}")
                summary, measured = html_pane(""), html_pane("")
                self.sections[tally.slug] = (bars, summary, measured)
                self._sections.append(pn.Column(
                    html_pane(f"<h3>Lesson {tally.number}: {html.escape(tally.title)}</h3>"
                              f"<p>{html.escape(tally.prompt)}</p>"),
                    pn.Row(pn.Column(bars, sizing_mode="stretch_width"),
                           pn.Column(measured, width=320), sizing_mode="stretch_width"),
                    summary, sizing_mode="stretch_width"))
            bars, summary, measured = self.sections[tally.slug]
            decided = tally.measured["choice"] if tally.measured else None
            bars.set([(c, tally.counts.get(c, 0), "measured" if c == decided else "")
                      for c in tally.choices])
            summary.object = site_html(f"<p>{html.escape(tally.summary())}</p>")
            measured.object = site_html(measured_html(tally))

    def __panel__(self):
        return self._layout


def class_predictions_view(store: Store | None = None) -> ClassPredictions:
    """The class's predictions for the teacher's console (module docstring)."""
    return ClassPredictions(store)


def aggregate_rows(store: Store | None = None) -> list[dict]:
    """The class's picks and answers counted per lesson, question and choice: no reader ids."""
    store = store if store is not None else get_store()
    decided = {t.slug: t.measured["choice"] for t in tallies(store) if t.measured}
    rows = []
    for row in store.tally("predictions"):
        measured = decided.get(row["lesson"], "")
        rows.append({"lesson": row["lesson"], "record": "prediction",
                     "question": row["question"], "choice": row["choice"],
                     "readers": row["readers"],
                     "correct": ("yes" if row["choice"] == measured else "no") if measured else "",
                     "measured": measured})
    for row in store.tally("answers"):
        rows.append({"lesson": row["lesson"], "record": "answer", "question": row["question"],
                     "choice": row["choice"], "readers": row["readers"],
                     "correct": "yes" if row["correct"] else "no", "measured": ""})
    return rows


def aggregate_csv(store: Store | None = None) -> str:
    """aggregate_rows as CSV, with a header line of column names."""
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=AGGREGATE_COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(aggregate_rows(store))
    return out.getvalue()


def aggregate_download(store: Store | None = None) -> pn.widgets.FileDownload:
    """A button that downloads the class's anonymous aggregate (built when pressed)."""
    return pn.widgets.FileDownload(
        callback=lambda: io.StringIO(aggregate_csv(store)), filename="class-aggregate.csv",
        label="Download the class's picks and answers (CSV, no names)", color="light")
