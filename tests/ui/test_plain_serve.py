"""Plain `panel serve app.py` (the command a Panel user tries first, with only --address to keep
it on this machine) serves the site styled: every page renders, the stylesheet reaches the panes,
the logo loads, nothing answers an error."""

from __future__ import annotations

import urllib.request

import pytest
from conftest import served_app
from playwright.sync_api import expect

from lessons.registry import LESSONS
from lessons.shell.router import PAGES
from lessons.shell.template import ROUTE, page_url

ACCENT = "rgb(31, 95, 139)"  # --accent in assets/app.css


@pytest.fixture(scope="session")
def plain_url(tmp_path_factory):
    """Session-scoped: pytest runs the browser test below with every other browser test and the
    other one later, and a module fixture would serve the app once for each."""
    with served_app(tmp_path_factory) as url:  # no option but the address
        yield url


def test_every_page_renders(plain_url):
    """Each page's HTML is rendered by the server's template on the first request (a template
    error, such as a favicon Panel cannot type, answers 500 on every page). No browser is opened,
    so no lesson starts measuring."""
    paths = [ROUTE, *(lesson.url for lesson in LESSONS), *(page_url(name) for name in PAGES)]
    for path in paths:
        with urllib.request.urlopen(f"{plain_url}/{path}", timeout=30) as response:
            html = response.read().decode()
        assert response.status == 200, path
        assert '<link rel="icon" href="data:image/svg+xml;base64,' in html, path


def test_plain_panel_serve_is_styled_without_errors(page, console, plain_url):
    failed = []
    page.on("response", lambda r: r.status >= 400 and failed.append(f"{r.status} {r.url}"))
    page.goto(f"{plain_url}/app")
    expect(page.get_by_text("How fast is a language model, really?").first).to_be_visible(
        timeout=60_000)
    current = page.locator('nav.course-nav a[aria-current="page"]')
    expect(current).to_have_css("background-color", ACCENT)  # the site's stylesheet applied
    expect(page.locator(".card h2").first).to_have_css("color", ACCENT)
    logo = page.locator("img.app-logo, #header img").first
    expect(logo).to_be_visible()
    assert logo.evaluate("img => img.naturalWidth") > 0
    assert failed == []
    assert console.errors == []
