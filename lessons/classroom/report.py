"""The report a reader takes home (/app?page=report): by lesson, their predictions, the
measurements they were shown (value, n, interval, device, engine version, cached or fresh,
when) and their checkpoint answers; printable, and as Markdown and JSON downloads for a course
to grade or a learning platform to take in.

    data = report_data("r123")        # plain data: what the JSON download holds
    report_markdown(data)             # the same as Markdown

The reader is this browser's cookie id (lessons.classroom.recording.reader_id): the report holds
what this browser did, under no name.
"""

from __future__ import annotations

import html
import io
import json
from collections.abc import Callable

import panel as pn

from widgets.html import html_pane, site_html
from widgets.site_css import site_stylesheets

from ..registry import LESSONS
from .recording import reader_id
from .store import Store, get_store, now_utc

KINDS = ("predictions", "shown", "answers")
NO_READER = ("This page shows the records of the browser that opens it, from the lesson pages it "
             "opened while served; here there is none.")

# The report on paper: one lesson's block kept together where it fits, its tables in small type,
# the buttons left off (the template's print sheet already drops the header and navigation).
REPORT_CSS = """
@media print {
  .no-print, .bk-btn { display: none !important; }
  .reader-report { font-size: 9pt; line-height: 1.25; }
  .reader-report h1 { font-size: 14pt; margin: 0 0 0.3em 0; }
  .reader-report h2 { font-size: 11pt; margin: 0.6em 0 0.2em 0; break-after: avoid; }
  .reader-report table { font-size: 8pt; break-inside: auto; }
  .reader-report tr { break-inside: avoid; }
  .report-lesson { break-inside: avoid-page; }
}
"""


def report_data(reader: str | None, store: Store | None = None) -> dict:
    """The reader's records by lesson, in the course's order (lessons not in the course last)."""
    store = store if store is not None else get_store()
    records = {kind: [] for kind in KINDS}
    if reader is not None:
        records = {"predictions": store.predictions(reader), "shown": store.shown(reader),
                   "answers": store.answers(reader)}
    order = {info.slug: info for info in LESSONS}
    slugs = {row["lesson"] for rows in records.values() for row in rows}
    lessons = []
    for slug in sorted(slugs, key=lambda s: (order[s].number if s in order else 999, s)):
        info = order.get(slug)
        entry = {"lesson": slug, "number": info.number if info else None,
                 "title": info.title if info else slug}
        for kind, rows in records.items():
            entry[kind] = [_plain(row) for row in rows if row["lesson"] == slug]
        lessons.append(entry)
    return {"reader": reader or "", "made_at": now_utc(), "store_error": store.error,
            "lessons": lessons}


def _plain(row: dict) -> dict:
    """A record without the store's own keys (row id, reader, lesson: the report says them)."""
    return {k: v for k, v in row.items() if k not in ("id", "reader", "lesson")}


def value_text(row: dict) -> str:
    """'2.3 ms (n = 31, p10-p90 2.1-2.6 ms)', or the choice it supports; '' for nothing."""
    if row.get("choice"):
        return row["choice"]
    if row.get("value") is None:
        return ""
    unit = f" {row['unit']}" if row.get("unit") else ""
    text = f"{row['value']:.4g}{unit}"
    extra = []
    if row.get("n") is not None:
        extra.append(f"n = {row['n']}")
    if row.get("low") is not None and row.get("high") is not None:
        extra.append(f"p10\u2013p90 {row['low']:.4g}\u2013{row['high']:.4g}{unit}")
    return f"{text} ({', '.join(extra)})" if extra else text


def origin_text(row: dict) -> str:
    """'cached, measured 2026-12-02T11:00:00+0000' or 'fresh, ...'."""
    when = row.get("measured_at") or "at an unknown time"
    return f"{'cached' if row.get('cached') else 'fresh'}, measured {when}"


def _cell(text) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def report_markdown(data: dict) -> str:
    """The report as Markdown: a section per lesson, a table per kind of record."""
    lines = ["# My course report", "",
             f"Reader (this browser's id): {data['reader'] or 'none'}. Made {data['made_at']}.",
             ""]
    if data.get("store_error"):
        lines += [f"> {data['store_error']}", ""]
    if not data["lessons"]:
        lines += ["Nothing recorded yet: predictions, shown measurements and checkpoint answers "
                  "appear here as you do the lessons.", ""]
    for lesson in data["lessons"]:
        number = f"Lesson {lesson['number']}: " if lesson["number"] else ""
        lines += [f"## {number}{lesson['title']}", ""]
        if lesson["predictions"]:
            lines += ["Predictions:", "", "| question | my pick | when |", "|---|---|---|"]
            lines += [f"| {_cell(p['question'])} | {_cell(p['pick'])} | {p['at']} |"
                      for p in lesson["predictions"]]
            lines.append("")
        if lesson["shown"]:
            lines += ["Measurements shown:", "",
                      "| what | value | details | device | engine | origin |",
                      "|---|---|---|---|---|---|"]
            lines += [f"| {_cell(s['what'])} | {_cell(value_text(s))} | {_cell(s['detail'])} | "
                      f"{_cell(s['device'] or 'unknown')} | "
                      f"{_cell(s['engine_version'] or 'unknown')} | {origin_text(s)} |"
                      for s in lesson["shown"]]
            lines.append("")
        if lesson["answers"]:
            lines += ["Checkpoint answers:", "", "| question | my answer | right | when |",
                      "|---|---|---|---|"]
            lines += [f"| {_cell(a['question'])} | {_cell(a['answer'])} | "
                      f"{'yes' if a['correct'] else 'no'} | {a['at']} |"
                      for a in lesson["answers"]]
            lines.append("")
    return "\n".join(lines)


def report_json(data: dict) -> str:
    return json.dumps(data, indent=1)


def _table(caption: str, head: tuple[str, ...], rows: list[list[str]]) -> str:
    header = "".join(f'<th scope="col">{h}</th>' for h in head)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in row) + "</tr>"
                   for row in rows)
    return (f'<table class="plain"><caption>{html.escape(caption)}</caption>'
            f"<thead><tr>{header}</tr></thead><tbody>{body}</tbody></table>")


def report_html(data: dict) -> str:
    """The page's body: the same sections and tables as the Markdown."""
    parts = ["<h1>My course report</h1>",
             '<p class="no-print">What you predicted, the measurements you were shown and your '
             "checkpoint answers, lesson by lesson, kept under this browser's id (no name). "
             "Print it (Ctrl+P, or Cmd+P), or download it below as Markdown or JSON.</p>"]
    if data["reader"]:
        parts.append(f"<p>Reader: {html.escape(data['reader'])}. Made {data['made_at']}.</p>")
    if data.get("store_error"):
        parts.append(f'<p class="error" role="alert">{html.escape(data["store_error"])}</p>')
    if not data["lessons"]:
        parts.append("<p>Nothing recorded yet: your predictions, the measurements you are "
                     "shown and your checkpoint answers appear here as you do the lessons.</p>")
    for lesson in data["lessons"]:
        number = f"Lesson {lesson['number']}: " if lesson["number"] else ""
        block = [f"<h2>{html.escape(number + lesson['title'])}</h2>"]
        if lesson["predictions"]:
            block.append(_table("Predictions", ("Question", "My pick", "When (UTC)"),
                                [[p["question"], p["pick"], p["at"]]
                                 for p in lesson["predictions"]]))
        if lesson["shown"]:
            block.append(_table(
                "Measurements shown", ("What", "Value", "Details", "Device", "Engine",
                                       "Cached or fresh, measured at"),
                [[s["what"], value_text(s), s["detail"], s["device"] or "unknown",
                  s["engine_version"] or "unknown", origin_text(s)] for s in lesson["shown"]]))
        if lesson["answers"]:
            block.append(_table("Checkpoint answers", ("Question", "My answer", "Right",
                                                       "When (UTC)"),
                                [[a["question"], a["answer"], "yes" if a["correct"] else "no",
                                  a["at"]] for a in lesson["answers"]]))
        parts.append(f'<section class="report-lesson">{"".join(block)}</section>')
    return f'<div class="reader-report">{"".join(parts)}</div>'


def _download(make: Callable[[], str], filename: str, label: str) -> pn.widgets.FileDownload:
    return pn.widgets.FileDownload(callback=lambda: io.StringIO(make()), filename=filename,
                                   label=label, color="light",
                                   css_classes=["no-print"])


def report_content(reader: str | None = None, store: Store | None = None) -> list:
    """The report page's parts for this browser's reader (or `reader`)."""
    reader = reader if reader is not None else reader_id()
    data = report_data(reader, store)
    body = pn.pane.HTML(site_html(report_html(data)), sizing_mode="stretch_width",
                        stylesheets=[*site_stylesheets(), REPORT_CSS],
                        css_classes=["reader-report-pane"])
    if reader is None:
        return [body, html_pane(f"<p>{NO_READER}</p>")]

    def fresh() -> dict:  # a download holds what is recorded when it is pressed
        return report_data(reader, store)

    downloads = pn.Row(
        _download(lambda: report_markdown(fresh()), "course-report.md",
                  "Download as Markdown"),
        _download(lambda: report_json(fresh()), "course-report.json", "Download as JSON"),
        css_classes=["no-print"])
    return [body, downloads]
