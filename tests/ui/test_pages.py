"""Every page loads in a real browser with no console error and no traceback; unknown names and
paths get a friendly page; the URL sets a page's controls, clamped with a notice."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect
from ui_helpers import assert_clean

from lessons.registry import LESSONS

PAGES = [
    ("/app", "How fast is a language model, really?"),
    *[(f"/app?{'lesson=' + lesson.slug}", f"Lesson {lesson.number}: {lesson.title}")
      for lesson in LESSONS],
    ("/app?page=about", "measured memory read bandwidth"),
    ("/app?page=vocabulary", "Terms used on every page"),
    ("/app?page=summary", "The tuning checklist"),
    ("/app?page=instructor&lesson=knob", "Instructor notes: lesson 4"),
    ("/app?page=engine-check", "Engine check"),
    ("/app?lesson=no-such-lesson", "There is no lesson called"),
    ("/app?page=no-such-page", "There is no page called"),
]



@pytest.mark.parametrize("path, words", PAGES, ids=[p for p, _ in PAGES])
def test_page_loads_without_errors(page, console, app_url, path, words):
    page.goto(app_url + path)
    expect(page.get_by_text(words).first).to_be_visible(timeout=60_000)
    expect(page.get_by_role("link", name="Vocabulary").first).to_be_visible()
    assert_clean(page, console)


def test_about_page_shows_the_engine_at_work(page, console, app_url):
    page.goto(app_url + "/app?page=about")
    expect(page.get_by_text(re.compile(r"\d+(\.\d)? GB/s")).first).to_be_visible(timeout=90_000)
    expect(page.get_by_text(re.compile(r"Engine worker: process \d+"))).to_be_visible(
        timeout=30_000)
    expect(page.get_by_text("random weights: timing only").first).to_be_visible()
    assert_clean(page, console)


def test_navigation_links_lead_to_lessons(page, console, app_url):
    page.goto(app_url + "/app")
    page.get_by_role("link", name=re.compile("The batch-size knob")).first.click()
    expect(page).to_have_url(re.compile(r"/app\?lesson=knob$"))
    expect(page.get_by_text("Lesson 4: The batch-size knob")).to_be_visible()
    page.get_by_role("link", name=re.compile("Lesson 5:")).click()
    expect(page).to_have_url(re.compile(r"lesson=roofline"))
    assert_clean(page, console)


def test_unknown_path_gets_a_friendly_404(page, app_url):
    response = page.goto(app_url + "/no/such/page")
    assert response.status == 404
    expect(page.get_by_text("Nothing here")).to_be_visible()
    expect(page.get_by_text("/no/such/page")).to_be_visible()
    page.get_by_role("link", name="course map").click()
    expect(page.get_by_text("How fast is a language model, really?")).to_be_visible()


def test_url_sets_controls_and_clamps_with_a_notice(page, console, app_url):
    page.goto(app_url + "/app?page=engine-check&batch_size=500&preset=huge&new_tokens=32")
    expect(page.get_by_text("it is set to 64")).to_be_visible(timeout=30_000)
    expect(page.get_by_text("which is not one of tiny, small")).to_be_visible()
    expect(page.get_by_text("New tokens: 32")).to_be_visible()
    expect(page).to_have_url(re.compile(r"batch_size=64"))  # the address bar tells the truth
    assert_clean(page, console)
