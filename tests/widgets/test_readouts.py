"""Readouts and plain tables: text a screen reader reads beside a chart."""

from __future__ import annotations

import panel as pn

from widgets.readouts import Readouts, table_html


def test_readouts_show_values_with_dashes_for_the_unset():
    readouts = Readouts([("ttft", "TTFT"), ("itl", "ITL")])
    pane = pn.panel(readouts).get_root()
    readouts.set(ttft="48 ms")
    assert readouts.text == "TTFT: 48 ms; ITL: \u2013"
    assert "48 ms" in readouts._pane.object and pane is not None
    readouts.notes = {"ttft": "TTFT: queued 2 + prefill 46 ms"}
    assert "queued 2" in readouts.text
    readouts.clear()
    assert readouts.values == {} and readouts.notes == {}


def test_table_html_escapes_and_marks_numbers():
    table = table_html(("what", "ms"), [("<b>", "1.5")], caption="c & d")
    assert "&lt;b&gt;" in table and "c &amp; d" in table
    assert '<td class="num">1.5</td>' in table and '<th scope="row">&lt;b&gt;</th>' in table
