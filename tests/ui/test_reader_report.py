"""The report a reader takes home, in a real browser: a pick on a lesson (the class's line appears
under it only then) is on /app?page=report of the same browser, and in its Markdown download;
another browser's report does not have it."""

from __future__ import annotations

from playwright.sync_api import expect
from ui_helpers import assert_clean, page_text

from lessons.three_schedules import ThreeSchedulesLesson

LONG = 300_000  # ms: the first page also waits for the engine worker to start
PICK = ThreeSchedulesLesson.prediction.choices[2]


def test_a_pick_reaches_the_readers_report(page, console, app_url, browser):
    page.set_default_timeout(LONG)
    page.goto(app_url + "/app?lesson=three-schedules")
    expect(page.get_by_text(PICK)).to_be_visible()
    assert "How the class predicted" not in page_text(page)
    page.get_by_text(PICK).click()
    expect(page.get_by_text("How the class predicted:")).to_be_visible()

    page.goto(app_url + "/app?page=report")  # the same browser: its cookie names the reader
    expect(page.get_by_role("heading", name="My course report")).to_be_visible()
    expect(page.get_by_text(PICK)).to_be_visible()
    with page.expect_download() as download:
        page.get_by_role("button", name="Download as Markdown").click()
    markdown = open(download.value.path(), encoding="utf-8").read()
    assert "## Lesson 3: " in markdown and f"| {PICK} |" in markdown
    assert_clean(page, console)

    other = browser.new_page()  # another reader: no cookie, no records
    other.set_default_timeout(LONG)
    try:
        other.goto(app_url + "/app?page=report")
        expect(other.get_by_text("Nothing recorded yet")).to_be_visible()
        assert PICK not in page_text(other)
    finally:
        other.close()
