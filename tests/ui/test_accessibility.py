"""WCAG 2.1 AA in a real browser: axe-core finds no critical or serious violation on any page the
course map links, nor on a lesson embedded with embed=true, nor in the dark theme, each audited
after its demo has drawn (small workloads from the URL, one page load per page). The lessons are
audited by their own browser tests (tests/ui/test_lessons_*.py, a11y_audit.assert_accessible) on
the page they drew and checked, so one page load and one measurement serve both; the pages here
are the rest.

`python -m pytest -q -s tests/ui/test_accessibility.py tests/ui/test_lessons_*.py` prints one
line of axe counts per page."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from a11y_audit import assert_accessible
from playwright.sync_api import expect
from ui_helpers import LONG, skip_prediction

from lessons.registry import LESSONS


def wait_for(pattern: str):
    def wait(page) -> None:
        expect(page.get_by_text(re.compile(pattern)).first).to_be_visible(timeout=LONG)
    return wait


def skip_then(pattern: str):
    """A lesson measures nothing fresh before the reader predicts or skips: skip, then wait."""
    def wait(page) -> None:
        skip_prediction(page)
        wait_for(pattern)(page)
    return wait


# name -> (path, what to do or wait for before the audit: the demo drawn). Lesson 4 embedded and
# dark with settings test_lessons_1_4 and test_teaching do not use: they expect theirs unmeasured.
AUDITED = {
    "course-map": ("/app", wait_for("How fast is a language model, really?")),
    "about": ("/app?page=about", wait_for(r"\d+(\.\d)? GB/s")),
    "vocabulary": ("/app?page=vocabulary", wait_for("Terms used on every page")),
    "summary": ("/app?page=summary", wait_for("The tuning checklist")),
    "instructor": ("/app?page=instructor", wait_for("Instructor notes")),
    "report": ("/app?page=report", wait_for("My course report")),
    "engine-check": ("/app?page=engine-check&batch_size=2&prompt_len=16&new_tokens=4",
                     lambda page: (page.get_by_role("button", name="Measure").click(),
                                   wait_for("Batch of 2 on")(page))),
    "knob-embedded": ("/app?lesson=knob&batch_size=4&prompt_len=24&new_tokens=8&embed=true",
                      skip_then(r"Last doubling, batch 2 to 4")),
    # Panel's dark theme, which any page takes from ?theme=dark: the same audit
    "course-map-dark": ("/app?theme=dark", wait_for("How fast is a language model, really?")),
    "knob-dark": ("/app?lesson=knob&batch_size=4&prompt_len=24&new_tokens=8&theme=dark",
                  skip_then(r"Last doubling, batch 2 to 4")),
}


def audited_by_lesson_tests() -> set[str]:
    """The lessons whose browser tests audit their page: `assert_accessible(page, "<slug>")` in
    tests/ui/test_lessons_*.py, as the course map's links name them (lesson=<slug>)."""
    calls = set()
    for path in Path(__file__).parent.glob("test_lessons_*.py"):
        calls.update(re.findall(r'assert_accessible\(page, "([\w-]+)"\)', path.read_text()))
    return {f"lesson={slug}" for slug in calls}


def test_every_page_the_course_map_links_is_audited(page, app_url):
    """A page added to the navigation without an audit (an entry in AUDITED, or its lesson's
    browser test calling assert_accessible) fails here."""
    page.goto(app_url + "/app")
    nav = page.locator("nav.course-nav a")
    expect(nav.first).to_be_visible(timeout=60_000)
    linked = {re.sub(r"^.*?/?app\??", "", href) for href in nav.evaluate_all(
        "links => links.map(a => a.getAttribute('href'))")}
    audited = {re.sub(r"^/app\??", "", path).split("&")[0] for path, _ in AUDITED.values()}
    assert linked - audited - audited_by_lesson_tests() == set()
    assert {f"lesson={info.slug}" for info in LESSONS} <= linked  # every lesson is linked


@pytest.mark.parametrize("name", list(AUDITED))
def test_no_critical_or_serious_axe_violations(page, console, app_url, name):
    path, drawn = AUDITED[name]
    page.goto(app_url + path)
    drawn(page)
    assert_accessible(page, name)
    assert console.errors == []
