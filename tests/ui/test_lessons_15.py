"""Lesson 15 in a real browser, with a small workload from the URL: the three ways of serving
arrive in one table, the disaggregated row says how it was measured (on this 2-core machine,
computed from measured step costs (replay)), the prediction's verdict names the ITL P99s, no page shows a
traceback and the console stays clean; then the page's accessibility audit (axe)."""

from __future__ import annotations

import re

from a11y_audit import assert_accessible
from playwright.sync_api import expect
from ui_helpers import LONG, page_text, skip_prediction


def test_disaggregation_serves_one_workload_three_ways(page, console, app_url):
    page.goto(f"{app_url}/app?lesson=disaggregation&requests=4&rate=4")
    skip_prediction(page)
    table = page.locator("table.disagg-table")
    expect(table.locator("tr", has_text="disaggregated").first).to_be_visible(timeout=LONG)
    row = table.locator("tr", has_text="disaggregated").first.inner_text()
    assert "measured live" in row or "computed from measured step costs (replay)" in row, row
    for name in ("colocated, whole prompts", "colocated, chunked prefill"):
        expect(table.locator("tr", has_text=name).first).to_be_visible()
    expect(page.get_by_text(re.compile(r"Measured: .* ms disaggregated")).first).to_be_visible()
    assert "Traceback" not in page_text(page) and console.errors == []
    assert_accessible(page, "disaggregation")
