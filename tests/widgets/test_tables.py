"""The HTML tables beside the charts and the number format they use."""

from __future__ import annotations

from widgets.tables import html_table, sig


def test_html_table_escapes_and_marks_numbers():
    table = html_table("A <caption>", ["what", "n"], [["<b>", "1,024"]], numeric=[False, True])
    assert "&lt;caption&gt;" in table and "<th scope=\"row\">&lt;b&gt;</th>" in table
    assert '<td class="num">1,024</td>' in table


def test_sig():
    assert sig(None) == "-" and sig(float("nan")) == "-"
    assert sig(0.52891) == "0.529" and sig(3.0) == "3.00" and sig(412.7) == "413"
    assert sig(4859.2) == "4,859" and sig(16) == "16" and sig(0) == "0"
