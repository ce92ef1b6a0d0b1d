"""A course site on another origin embeds a lesson: by iframe, and by Bokeh's script tag (which
needs the server started with --allow-websocket-origin for that site)."""

from __future__ import annotations

import re

from playwright.sync_api import expect
from ui_helpers import LONG, skip_prediction

TITLE = "Lesson 4: The batch-size knob"
MEASURED = re.compile(r"Last doubling, batch 2 to 4")  # words built from measured points


def test_lesson_renders_in_an_iframe_of_another_origin(page, console, embed_site):
    page.goto(f"{embed_site}/iframe.html")
    frame = page.frame_locator("#lesson")
    expect(frame.get_by_text(TITLE)).to_be_visible(timeout=60_000)
    expect(frame.get_by_text("What it measures:")).to_be_visible()
    # a working lesson, not only its prose: its first measurement arrives inside the frame
    skip_prediction(frame)
    expect(frame.get_by_text(MEASURED)).to_be_visible(timeout=LONG)
    assert console.errors == []


def test_lesson_renders_from_a_script_tag_on_another_origin(page, console, embed_site):
    page.goto(f"{embed_site}/script.html")
    # The document is pulled over the websocket: rendering proves the origin was allowed.
    expect(page.get_by_text(TITLE)).to_be_visible(timeout=60_000)
    expect(page.get_by_text("Our course")).to_be_visible()
    # the lesson's first measurement updates the page: its stylesheets come from the app's
    # server too, never from a CDN (no network on a classroom LAN)
    expect(page.get_by_text("What it measures:")).to_be_visible()
    skip_prediction(page)
    expect(page.get_by_text(MEASURED)).to_be_visible(timeout=LONG)
    assert console.errors == []
