"""Lesson 14 in a real browser, on the tiny expert presets from the URL: after the reader skips
the prediction, both models are measured at every batch size, the verdict gives the experts read
and both batch sizes' ratios, the prediction's verdict appears, and the page passes its
accessibility audit (axe: no critical or serious WCAG 2.1 AA violation) with no traceback and a
clean console."""

from __future__ import annotations

import re

from a11y_audit import assert_accessible
from playwright.sync_api import expect
from ui_helpers import LONG, page_text, skip_prediction


def test_experts_measures_both_models_and_the_experts_read(page, console, app_url):
    page.goto(f"{app_url}/app?lesson=experts&preset=moe-tiny")
    skip_prediction(page)
    verdict = page.locator(".experts-verdict")
    expect(verdict.get_by_text(re.compile(r"Batch 64: the MoE step read [\d.]+x")).first) \
        .to_be_visible(timeout=LONG)
    read = re.compile(r"Experts read: 2\.0 per layer at batch 1, 4\.0 at batch 64 \(of 4\)")
    expect(verdict.get_by_text(read).first).to_be_visible()
    expect(page.get_by_text(re.compile(r"Measured: .*\(at batch 64 the MoE step took")).first) \
        .to_be_visible(timeout=LONG)
    assert page.locator("table.experts-table tbody tr").count() == 7
    assert "Traceback" not in page_text(page) and console.errors == []
    assert_accessible(page, "experts")
