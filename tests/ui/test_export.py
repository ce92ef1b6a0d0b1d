"""`python -m lessons.export`: lesson 4 exported to a folder opens from disk in Chromium with no
server running and nothing fetched over the network; its prose, its chart and the numbers its
default view measured are there, labelled with device and time; the prediction and the checkpoint
answer a pick with no server; the index links the page."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
from conftest import ROOT
from playwright.sync_api import expect
from ui_helpers import page_text

from lessons.export import rewrite_links
from lessons.knob import PROSE, QUESTIONS


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """The command as a course site would run it, with the test session's private cache
    (empty or not: the export measures what it lacks)."""
    out = tmp_path_factory.mktemp("site")
    done = subprocess.run([sys.executable, "-m", "lessons.export", "--lesson", "knob",
                           "--out", str(out)], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return out, done.stderr


def test_command_reports_and_writes(site):
    out, said = site
    assert sorted(p.name for p in out.iterdir()) == ["index.html", "knob.html"]
    assert "knob: sweep_point" in said and "knob: wrote" in said  # progress per job, then the file
    index = (out / "index.html").read_text()
    assert '<a href="knob.html">Lesson 4: The batch-size knob</a>' in index
    assert "two-clocks.html" not in index  # only what was exported


def test_exported_lesson_works_from_disk(site, page, console):
    out, _ = site
    fetched = []
    page.on("request", lambda r: not r.url.startswith(("file:", "data:", "blob:"))
            and fetched.append(r.url))
    page.goto((out / "knob.html").as_uri())
    expect(page.get_by_text("Two lines, one knob").first).to_be_visible(timeout=60_000)
    text = " ".join(page_text(page).split())  # text nodes joined: one space between words
    assert "A static copy of lesson 4" in text
    assert re.search(r"measured by the course's engine on \S.* (at|between) \d{4}-\d\d-\d\d "
                     r"\d\d:\d\d", text), "the banner names the device and time"
    # the default view's points (batch 8, 4 and 1) in the curve's table, in tokens/s
    assert re.search(r"Points measured so far, tiny preset", text)
    for batch in (1, 4, 8):
        assert re.search(rf"\b{batch}\s+[\d,]+\s", text), f"batch {batch} row"
    assert page.locator("canvas").count() >= 2  # the curve and the frontier chart, drawn
    slider = page.locator(".bk-input-group .noUi-target, .noUi-target").first
    expect(slider).to_have_attribute("disabled", re.compile(".*"))

    # the prediction: a pick shows what the recorded numbers support
    page.get_by_label("3 to 6 times as many").check()
    verdict = page.locator(".why-prediction-1")
    expect(verdict).to_be_visible()
    expect(verdict).to_contain_text(re.compile(r"(As you predicted|Not what you predicted)\. "
                                               r".*tokens/s at batch 1"))

    # the checkpoint: a right pick says so, a wrong one says why not
    first = QUESTIONS[0]
    page.get_by_label(first.answer.text).check()
    expect(page.get_by_text(f"Right. {first.answer.why}")).to_be_visible()
    wrong = next(c for c in first.choices if not c.correct)
    page.get_by_label(wrong.text).check()
    expect(page.get_by_text(f"Not quite. {wrong.why}")).to_be_visible()
    expect(page.get_by_text(f"Right. {first.answer.why}")).to_be_hidden()
    # the measured question, built from the exported numbers (batch 1, 2, 4, 8 are not all
    # in the default view, so it is not asked) never shows its Python-only placeholder
    assert "a question on your own curve appears here" not in page_text(page)

    # a chart's data download carries its file inside the page
    with page.expect_download() as download:
        page.get_by_role("button", name="Download CSV").first.click()
    csv = open(download.value.path(), encoding="utf-8").read()
    assert "tokens_per_s" in csv and "\n8," in csv

    assert fetched == [], "an exported page fetches nothing"
    assert console.errors == []


def test_bad_arguments_say_so_in_one_line(tmp_path):
    """An unknown lesson, no folder, no lesson: status 2, the usage and one error line naming
    what is wrong, nothing written."""
    for args, named in ((["--lesson", "nope", "--out", str(tmp_path)], "no lesson called 'nope'"),
                        (["--all"], "--out"), (["--out", str(tmp_path)], "--lesson")):
        done = subprocess.run([sys.executable, "-m", "lessons.export", *args], cwd=ROOT,
                              capture_output=True, text=True, timeout=60)
        last = done.stderr.strip().splitlines()[-1]
        assert done.returncode == 2 and last.startswith("python -m lessons.export: error:")
        assert named in last, last
    assert list(tmp_path.iterdir()) == []


def test_links_follow_the_export():
    """A lesson link to an exported page points at its file, the course map at the index, and a
    link to a page that was not exported keeps only its words."""
    text = rewrite_links(PROSE + '<a href="app">Course map</a> <a href="app?page=vocabulary">'
                         "the vocabulary</a>", {"slo-goodput"})
    assert 'href="slo-goodput.html"' in text
    assert 'href="index.html"' in text
    assert 'href="app?lesson=roofline"' not in text and "lesson 5" in text
    assert "the vocabulary" in text and "app?page=" not in text
