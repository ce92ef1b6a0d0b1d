"""Teaching in a real browser: a lesson measures nothing fresh until the reader predicts, then
puts the prediction beside the measurement; a reload asks again before it shows the cached
result (at once, marked as such), with the checkpoint's choices in the same (per-reader) order;
the course summary prints on one sheet with the site's navigation left off."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect
from ui_helpers import LONG, page_text

# Settings no other browser test uses, so this lesson's points are not in the cache yet.
KNOB = "/app?lesson=knob&preset=tiny&batch_size=8&prompt_len=24&new_tokens=6"
CHECK, SOURCE = 8, 9  # the points table's disturbance check and source columns
RELOADS = 3  # visits after the first, until one shows cached points
FIRST_QUESTION = ("Each step reads every weight to make a single token",
                  "The prompt has to be read again at every step",
                  "One request cannot use more than one core at a time")

POINTS_JS = """() => {
  for (const doc of Bokeh.documents) {
    const m = doc.get_model_by_name('points');
    if (m) { return Array.from(m.data instanceof Map ? m.data.get('batch') : m.data.batch); }
  }
  return null;
}"""


def choice_order(page) -> list[str]:
    """The first checkpoint question's choices, in the order this reader sees them."""
    labels = [t.strip() for t in page.locator("label").all_inner_texts()]
    return [t for t in labels if t in FIRST_QUESTION]


def test_a_lesson_waits_for_the_prediction_and_a_reload_shows_the_cached_result(
        page, console, app_url):
    page.goto(app_url + KNOB)
    expect(page.get_by_role("heading", name="Your prediction")).to_be_visible(timeout=60_000)
    expect(page.get_by_text(re.compile("waiting for your prediction"))).to_be_visible(
        timeout=30_000)
    assert page.evaluate(POINTS_JS) == []  # nothing measured before the prediction
    order = choice_order(page)
    assert sorted(order) == sorted(FIRST_QUESTION)
    page.get_by_role("radio", name="3 to 6 times as many").check()
    verdict = re.compile(r"(As you predicted|Not what you predicted)\. You predicted: 3 to 6 "
                         r"times as many\. Measured: .* tokens/s at batch 1")
    expect(page.get_by_text(verdict)).to_be_visible(timeout=LONG)
    # the verdict needs batch 1 and 8 only: on a busy machine a disturbed batch 4 is measured
    # again and drawn later
    page.wait_for_function(f"() => (({POINTS_JS})() || []).length == 3", timeout=LONG)
    assert sorted(page.evaluate(POINTS_JS)) == [1, 4, 8]
    rows = point_rows(page, 3)
    assert all(cells[SOURCE].startswith("measured live") for cells in rows.values())
    quiet = quiet_batches(rows)
    # a reload: the prediction is asked again, and nothing is drawn before it, not even the
    # quiet points the cache holds (a point still disturbed after its re-measures is not cached,
    # by design); after the pick the cached ones come at once, labelled; the checkpoint keeps
    # this reader's order (the seed is in a cookie). Where no point was quiet (a busy machine),
    # the reload measures them again, and the next reload reads those measured quietly.
    for _ in range(RELOADS):
        page.reload()
        expect(page.get_by_role("heading", name="Your prediction")).to_be_visible(timeout=60_000)
        expect(page.get_by_text(re.compile("waiting for your prediction|a result is ready"))
               ).to_be_visible(timeout=60_000)
        assert (page.evaluate(POINTS_JS) or []) == []
        assert choice_order(page) == order
        page.get_by_role("radio", name="3 to 6 times as many").check()
        page.wait_for_function(f"() => (({POINTS_JS})() || []).length >= {len(quiet)}",
                               timeout=60_000)
        expect(page.get_by_text(verdict)).to_be_visible(timeout=LONG)
        page.wait_for_function(f"() => (({POINTS_JS})() || []).length == 3", timeout=LONG)
        again = point_rows(page, 3)
        for batch, cells in again.items():
            assert cells[SOURCE].startswith("cached" if batch in quiet else "measured live"), (
                batch, cells)
        if quiet:
            break
        quiet = quiet_batches(again)
    else:
        pytest.skip(f"no knob point was measured quietly in {RELOADS} visits (a busy machine), "
                    "so none was cached for a reload to show")
    assert "Traceback" not in page_text(page) and console.errors == []


def quiet_batches(rows: dict[int, list[str]]) -> list[int]:
    return sorted(batch for batch, cells in rows.items() if cells[CHECK] == "quiet")


def point_rows(page, count: int) -> dict[int, list[str]]:
    """The knob's points table, by batch size: each row's cells (CHECK: its disturbance check,
    'quiet', 'DISTURBED: why' or 'not checked'; SOURCE: measured live or cached), once it has
    `count` rows (it comes with the chart's points, in the same update)."""
    rows: dict[int, list[str]] = {}
    for _ in range(60):
        rows = {}
        for row in page.locator("tr").all_inner_texts():
            cells = [cell.strip() for cell in row.split("\t")]
            if len(cells) == 10 and cells[0].isdigit():
                rows[int(cells[0])] = cells
        if len(rows) == count:
            return rows
        page.wait_for_timeout(500)
    raise AssertionError(f"the points table has {sorted(rows)}, not {count} rows")


def test_the_course_summary_prints_on_one_sheet(page, console, app_url):
    page.goto(app_url + "/app?page=summary")
    expect(page.get_by_text("The tuning checklist")).to_be_visible(timeout=60_000)
    expect(page.locator("#sidebar")).to_be_visible()
    page.emulate_media(media="print")
    expect(page.locator("#sidebar")).to_be_hidden()
    expect(page.locator("#header")).to_be_hidden()
    expect(page.get_by_text("Lesson 8: Targets, goodput and cost")).to_be_visible()
    pdf = page.pdf(format="A4", print_background=False)
    pages = len(re.findall(rb"/Type\s*/Page[^s]", pdf))
    assert pages == 1, f"the summary printed on {pages} pages"
    assert console.errors == []
