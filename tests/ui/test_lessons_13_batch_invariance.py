"""Lesson 13 in a real browser, with a small run from the URL (batches up to 8, 4 new tokens):
after the prediction is skipped, the default runs' verdicts and tables, the batch-invariant run
with every logit's bits kept, and its cost as a ratio of the measured steps. No traceback, a
clean console, and the lesson's accessibility audit on the page it drew."""

from __future__ import annotations

import re

from a11y_audit import assert_accessible
from playwright.sync_api import expect
from ui_helpers import LONG, page_text, skip_prediction


def test_batch_invariance_compares_the_prompt_alone_and_in_batches(page, console, app_url):
    page.goto(f"{app_url}/app?lesson=batch-invariance&largest_batch=8&new_tokens=4")
    skip_prediction(page)
    verdicts = page.locator(".invariance-verdict")
    expect(verdicts.get_by_text(re.compile(r"Default\. Alone again \(batch 1\)")).first) \
        .to_be_visible(timeout=LONG)
    expect(verdicts.get_by_text(re.compile(r"Batch-invariant, chunked prefill\. .*kept the "
                                           r"same bits")).first).to_be_visible(timeout=LONG)
    cost = page.locator(".invariance-cost")
    expect(cost.get_by_text(re.compile(r"At batch 8 a batch-invariant step took .* [\d.]+x"))
           .first).to_be_visible(timeout=LONG)
    assert "Traceback" not in page_text(page) and console.errors == []
    assert_accessible(page, "batch-invariance")
