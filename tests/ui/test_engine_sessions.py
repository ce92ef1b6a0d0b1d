"""Sessions share one engine: two readers measuring at once both get their results, and a
reader keeps navigating while another's job runs."""

from __future__ import annotations

import re

from playwright.sync_api import expect
from ui_helpers import ConsoleLog, page_text

LONG = "&prompt_len=64&new_tokens=1024"  # seconds of decode steps, cancellable between them


def cancelled_count(page) -> int:
    match = re.search(r"Cancelled: (\d+) ", page_text(page))
    assert match, "the about page shows no cancelled count"
    return int(match.group(1))


def open_check(browser, app_url, batch: int, extra: str = ""):
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    console = ConsoleLog(page)
    page.goto(f"{app_url}/app?page=engine-check&batch_size={batch}&fresh=true{extra}")
    expect(page.get_by_role("button", name="Measure")).to_be_enabled(timeout=60_000)
    return context, page, console


def test_two_readers_measuring_at_once_both_get_results(browser, app_url):
    first = open_check(browser, app_url, 2)
    second = open_check(browser, app_url, 3)
    try:
        for _, page, _ in (first, second):
            page.get_by_role("button", name="Measure").click()
        for (_, page, console), batch in ((first, 2), (second, 3)):
            expect(page.get_by_text(f"Batch of {batch} on")).to_be_visible(timeout=120_000)
            expect(page.get_by_text("measured live on")).to_be_visible()
            assert "Traceback" not in page_text(page)
            assert console.errors == []
    finally:
        first[0].close()
        second[0].close()


def test_a_reader_navigates_while_another_reader_measures(browser, app_url):
    busy = open_check(browser, app_url, 64, LONG)
    reader = browser.new_context().new_page()
    console = ConsoleLog(reader)
    try:
        busy[1].get_by_role("button", name="Measure").click()
        reader.goto(f"{app_url}/app?page=about")
        expect(reader.get_by_text(re.compile(r"Now: running sweep_point"))).to_be_visible(
            timeout=60_000)
        for path, words in (("/app?page=vocabulary", "Terms used on every page"),
                            ("/app?lesson=knob", "Lesson 4: The batch-size knob"),
                            ("/app", "How fast is a language model, really?")):
            reader.goto(app_url + path)
            expect(reader.get_by_text(words)).to_be_visible(timeout=10_000)
        assert not busy[1].get_by_text("Batch of 64 on").is_visible()  # still measuring
        expect(busy[1].get_by_text("Batch of 64 on")).to_be_visible(timeout=180_000)
        assert console.errors == []
    finally:
        busy[0].close()
        reader.context.close()


def test_closing_a_page_cancels_its_running_job(browser, app_url):
    busy = open_check(browser, app_url, 64, LONG)
    watcher = browser.new_context().new_page()
    try:
        busy[1].get_by_role("button", name="Measure").click()
        watcher.goto(f"{app_url}/app?page=about")
        running = watcher.get_by_text(re.compile(r"Now: running sweep_point \(.*batch_size 64"))
        expect(running).to_be_visible(timeout=60_000)
        before = cancelled_count(watcher)
        busy[0].close()  # the reader leaves: the server destroys the session and its job
        expect(watcher.get_by_text(f"Cancelled: {before + 1} ")).to_be_visible(timeout=30_000)
        expect(watcher.get_by_text("Now: idle, waiting for a job.")).to_be_visible()
    finally:
        watcher.context.close()
