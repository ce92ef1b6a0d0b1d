"""Sessions share one engine: two readers measuring at once both get their results; a reader
keeps navigating while another's job runs; a reader who leaves has their job cancelled."""

from __future__ import annotations

import json
import re
import urllib.request

from playwright.sync_api import expect
from ui_helpers import ConsoleLog, page_text

QUICK = "&prompt_len=16&new_tokens=8"
# Many decode steps, each a cancellation point: long on any CPU, and ended by leaving the page.
LONG = "&prompt_len=16&new_tokens=1024"


def service_counts(page) -> tuple[int, int]:
    """(jobs measured, jobs cancelled) since the server started, from the about page."""
    text = page_text(page)
    measured = re.search(r"Done since the server started: (\d+) measured", text)
    cancelled = re.search(r"Cancelled: (\d+) ", text)
    assert measured and cancelled, "the about page shows no job counts"
    return int(measured.group(1)), int(cancelled.group(1))


def engine_status(app_url: str) -> dict:
    with urllib.request.urlopen(f"{app_url}/engine-status", timeout=30) as response:
        return json.loads(response.read())


def open_check(browser, app_url, batch: int, extra: str):
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    console = ConsoleLog(page)
    page.goto(f"{app_url}/app?page=engine-check&batch_size={batch}&fresh=true{extra}")
    expect(page.get_by_role("button", name="Measure")).to_be_enabled(timeout=60_000)
    return context, page, console


def test_two_readers_measuring_at_once_both_get_results(browser, app_url):
    first = open_check(browser, app_url, 2, QUICK)
    second = open_check(browser, app_url, 3, QUICK)
    try:
        for _, page, _ in (first, second):
            page.get_by_role("button", name="Measure").click()
        for (_, page, console), batch in ((first, 2), (second, 3)):
            # the table's caption (the live region reads the same words with the figures)
            expect(page.locator("caption", has_text=f"Batch of {batch} on")).to_be_visible(
                timeout=180_000)
            # the status line (the live region, after it, reads the same words)
            expect(page.get_by_text("measured live on").first).to_be_visible()
            assert "Traceback" not in page_text(page)
            assert console.errors == []
    finally:
        first[0].close()
        second[0].close()


def test_others_read_while_one_measures_and_leaving_cancels_the_job(browser, app_url):
    reader = browser.new_context().new_page()
    console = ConsoleLog(reader)
    reader.goto(f"{app_url}/app?page=about")  # measured (or cached) first: no queue behind LONG
    expect(reader.get_by_text(re.compile(r"\d GB/s")).first).to_be_visible(timeout=120_000)
    busy_context, busy, _ = open_check(browser, app_url, 64, LONG)
    running = re.compile(r"Now: running sweep_point \(.*batch_size 64")
    try:
        busy.get_by_role("button", name="Measure").click()
        reader.goto(f"{app_url}/app?page=about")
        expect(reader.get_by_text(running)).to_be_visible(timeout=120_000)
        for path, words in (("/app?page=vocabulary", "Terms used on every page"),
                            ("/app?lesson=knob", "Lesson 4: The batch-size knob"),
                            ("/app", "How fast is a language model, really?")):
            reader.goto(app_url + path)
            expect(reader.get_by_text(words)).to_be_visible(timeout=30_000)
        reader.goto(f"{app_url}/app?page=about")
        expect(reader.get_by_text(running)).to_be_visible(timeout=30_000)  # still measuring
        _, cancelled = service_counts(reader)
        long_job = engine_status(app_url)["running"]
        assert long_job["kind"] == "sweep_point" and long_job["params"]["batch_size"] == 64
        busy_context.close()  # the reader leaves: the server ends the session and its job
        expect(reader.get_by_text("Now: idle, waiting for a job.")).to_be_visible(timeout=60_000)
        # The long job stopped without a result (its own outcome: a count of every job measured
        # would also count another page's job ending meanwhile); other pages the reader left
        # may add to the cancelled count too, so it is at least one more.
        ended = {j["id"]: j["state"] for j in engine_status(app_url)["recently_ended"]}
        assert ended.get(long_job["id"]) == "cancelled"
        _, cancelled_after = service_counts(reader)
        assert cancelled_after >= cancelled + 1
        assert console.errors == []
    finally:
        reader.context.close()


def test_the_engine_status_is_served_as_json(app_url):
    with urllib.request.urlopen(f"{app_url}/engine-status", timeout=30) as response:
        assert response.headers["Content-Type"].startswith("application/json")
        status = json.loads(response.read())
    assert {"ready", "running", "queued", "queue", "jobs_done", "memory"} <= set(status)
    assert status["memory"]["web"]["rss_mib"] > 0
    assert {"trims", "trim_pending", "last_trim"} <= set(status["web_heap"])  # widgets.runtime.heap
    assert not any("session" in key for key in status)  # nothing that names a reader
