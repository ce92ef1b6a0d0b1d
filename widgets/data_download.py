"""A chart's data as CSV and JSON files, with the record of how it was measured.

A reader who wants to cite a figure, or redo the analysis, needs the numbers behind the chart and
what produced them. Each chart gets two download buttons (Panel's FileDownload) built from the
same two callables the page already has:

    DataDownload("knob-points", rows=lambda: [...one dict per plotted point...],
                 header=lambda: {"device": ..., "engine_version": ..., ...})

- CSV: the header as "# key: value" lines (a dict or list value as JSON), then one line of
  column names and one row per point: what spreadsheet tools and pandas.read_csv(comment="#")
  read;
- JSON: {"header": {...}, "rows": [...]}.

The rows are the chart's own points (the page passes what it draws, not a copy kept apart), so the
file is what the reader sees. Files are built when the button is pressed.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Callable
from datetime import datetime, timezone

import panel as pn

Rows = Callable[[], list[dict]]
Header = Callable[[], dict]


def _plain(value):
    """JSON-safe: NaN and infinities as None (JSON has no NaN)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def csv_text(header: dict, rows: list[dict]) -> str:
    out = io.StringIO()
    for key, value in header.items():
        text = json.dumps(_plain(value)) if isinstance(value, (dict, list)) else value
        out.write(f"# {key}: {'' if text is None else text}\n")
    columns = list(dict.fromkeys(k for row in rows for k in row))
    writer = csv.DictWriter(out, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: "" if v is None else v for k, v in _plain(row).items()})
    return out.getvalue()


def json_text(header: dict, rows: list[dict]) -> str:
    return json.dumps({"header": _plain(header), "rows": _plain(rows)}, indent=1)


def read_csv(text: str) -> tuple[dict, list[dict]]:
    """The header lines and rows of a csv_text file (values as text): for tests and readers.
    A value may hold a line break (a token's text): the rows are read by csv, not by line."""
    header, start = {}, 0
    for line in text.splitlines(keepends=True):
        if not line.startswith("# "):
            break
        key, _, value = line[2:].rstrip("\n").partition(": ")
        header[key] = value
        start += len(line)
    return header, list(csv.DictReader(io.StringIO(text[start:])))


def now_utc() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


class DataDownload(pn.viewable.Viewer):
    """'Download CSV' and 'Download JSON' for one chart's points and their measurement record."""

    def __init__(self, name: str, rows: Rows, header: Header, what: str = "the chart's data"):
        super().__init__()
        self.rows, self.header = rows, header
        common = {"color": "primary", "variant": "outline", "embed": False, "width": 170, "margin": (4, 8)}
        self.csv = pn.widgets.FileDownload(callback=self._csv, filename=f"{name}.csv",
                                           label="Download CSV", **common)
        self.json = pn.widgets.FileDownload(callback=self._json, filename=f"{name}.json",
                                            label="Download JSON", **common)
        self._layout = pn.Row(pn.pane.HTML(f"<span>{what}:</span>", margin=(10, 4)),
                              self.csv, self.json, css_classes=["data-download"])

    def texts(self) -> tuple[str, str]:
        """(CSV, JSON) as they would be downloaded now."""
        header, rows = self.header(), self.rows()
        return csv_text(header, rows), json_text(header, rows)

    def _csv(self) -> io.StringIO:
        return io.StringIO(self.texts()[0])

    def _json(self) -> io.StringIO:
        return io.StringIO(self.texts()[1])

    def __panel__(self):
        return self._layout
