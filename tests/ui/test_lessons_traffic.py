"""Lesson 16 in a real browser, with a small workload from the URL: the four runs (one queue,
lanes, flooded, with a quota) come back as a table with every group of every run, the three
findings and the prediction's verdict; no traceback, a clean console, and the lesson's
accessibility audit on the page it drew (axe: no critical or serious WCAG 2.1 AA violation)."""

from __future__ import annotations

import re

from a11y_audit import assert_accessible
from playwright.sync_api import expect
from ui_helpers import LONG, page_text, skip_prediction


def test_traffic_classes_draws_each_group_of_the_four_runs(page, console, app_url):
    page.goto(f"{app_url}/app?lesson=traffic-classes&chat_requests=4&batch_requests=1")
    skip_prediction(page)
    verdict = page.locator(".traffic-verdict")
    expect(verdict.get_by_text(re.compile("What the quota protects")).first) \
        .to_be_visible(timeout=LONG)
    table = page.locator("table.traffic-table")
    for run in ("one queue", "lanes, flooded, quota"):
        expect(table.locator("tr", has_text=run).first).to_be_visible()
    expect(table.locator("tr", has_text="flooding tenant").first).to_be_visible()
    expect(page.get_by_text(re.compile(r"Measured: .* tokens/s with lanes")).first) \
        .to_be_visible()
    assert "Traceback" not in page_text(page) and console.errors == []
    assert_accessible(page, "traffic-classes")
