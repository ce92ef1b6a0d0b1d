"""The download files: header lines and rows that read back to what was given; NaN as empty."""

import json
import math

import panel as pn

from widgets.data_download import DataDownload, csv_text, json_text, read_csv

HEADER = {"device": "cpu: test (2 cores)", "params": {"rate": [1, 2]}, "measured": "fresh"}
ROWS = [{"x": 1, "y": 2.5, "lo": float("nan")}, {"x": 2, "y": 3.25, "lo": 3.0}]


def test_csv_reads_back_header_and_rows():
    head, rows = read_csv(csv_text(HEADER, ROWS))
    assert head["device"] == HEADER["device"] and json.loads(head["params"]) == HEADER["params"]
    assert rows == [{"x": "1", "y": "2.5", "lo": ""}, {"x": "2", "y": "3.25", "lo": "3.0"}]


def test_json_has_no_nan():
    data = json.loads(json_text(HEADER, ROWS))
    assert data["header"] == HEADER and data["rows"][0]["lo"] is None
    assert data["rows"][1] == ROWS[1] and not math.isnan(data["rows"][1]["lo"])


def test_the_buttons_build_the_files_when_pressed():
    rows = []
    dl = DataDownload("points", lambda: rows, lambda: HEADER)
    pn.panel(dl).get_root()
    rows.append({"x": 5, "y": 1.0})  # added after the widget was built: still in the file
    assert dl.csv.filename == "points.csv" and dl.json.filename == "points.json"
    assert json.loads(dl._json().read())["rows"] == [{"x": 5, "y": 1.0}]
    assert read_csv(dl._csv().read())[1] == [{"x": "5", "y": "1.0"}]


def test_a_value_with_a_line_break_reads_back_whole():
    rows = [{"token": 0, "text": "Hello,\n \"world\""}, {"token": 1, "text": ""}]
    head, back = read_csv(csv_text({"lesson": "two clocks"}, rows))
    assert head == {"lesson": "two clocks"}
    assert back == [{"token": "0", "text": "Hello,\n \"world\""}, {"token": "1", "text": ""}]
