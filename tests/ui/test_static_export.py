"""`python -m lessons.export --all`: every lesson exported to a folder, with an index, opens from
disk in Chromium with no server running and nothing fetched over the network; each page has its
prose, its charts drawn from the numbers it measured (labelled with device and time), a prediction
that a recorded measurement answers, and a checkpoint that answers a pick; the index and the
lessons' own links lead to the exported files.

One export is shared by the module's tests, run with the served app's cache as a course site would
run it after a class. To keep it short, the lessons whose default view takes minutes of CPU are
exported at small settings given as their URLs would give them (the small workloads the served
lessons' browser tests use, so mostly read from that cache); the rest at their default views. The
default views of every lesson are exported by the same code (`--all` alone, see README)."""

from __future__ import annotations

import re
import subprocess
import sys
from urllib.parse import unquote, urlparse

import pytest
from playwright.sync_api import expect
from ui_helpers import page_text, served_env

from bench.web.served_app import ROOT
from lessons.export import main as export_main
from lessons.export import rewrite_links
from lessons.knob import PROSE, QUESTIONS
from lessons.registry import LESSONS, lesson_class
from lessons.two_clocks import NO_BROWSER_CLOCK
from widgets.checkpoint import Question

SMALL = {  # the served lessons' browser tests' workloads (tests/ui/test_lessons_*.py)
    "two-clocks": "max_new_tokens=8",
    "average-lies": "requests=10&rate=30&long_share=0",
    "three-schedules": "requests=6&rate=40",  # max batch 4: the prediction asks about it
    "roofline": "preset=tiny&max_batch=2&max_prompt=64&curve_points=0",
    "chunked-prefill": "requests=4&output_len=64&long_prompt=1536&chunk_size=128",
    "slo-goodput": "points=2&requests=6&max_rate=64&runs=2",
    "prefix-cache": "shared_prefix=512&requests=3",
    "quantization": "preset=tiny",
    "speculative": "k=3&batch_size=1",
    "capacity": "prompt_len=16&output_len=4&rate=200",
    "batch-invariance": "largest_batch=8&new_tokens=4",
    "experts": "preset=moe-tiny",
    "disaggregation": "requests=4&rate=4",
    "traffic-classes": "chat_requests=4&batch_requests=1",
}
DASH = "\u2013"

# Every Bokeh data source in the page with its row count, and every link's target, shadow DOMs
# included (Panel renders each pane in its own).
SOURCES_JS = """() => {
  const rows = [];
  for (const doc of Bokeh.documents) {
    for (const model of doc.all_models) {
      if (typeof model.stream === 'function' && model.data) {  // a ColumnDataSource
        const data = model.data instanceof Map ? [...model.data.values()]
                                               : Object.values(model.data);
        rows.push(data.length ? data[0].length : 0);
      }
    }
  }
  return rows;
}"""
LINKS_JS = """() => {
  const hrefs = [];
  const walk = (root) => {
    for (const el of root.querySelectorAll('*')) {
      if (el.tagName === 'A' && el.hasAttribute('href')) hrefs.push(el.getAttribute('href'));
      if (el.shadowRoot) walk(el.shadowRoot);
    }
  };
  walk(document);
  return hrefs;
}"""


def words(page) -> str:
    return " ".join(page_text(page).split())  # text nodes joined: one space between words


@pytest.fixture(scope="session")
def site(tmp_path_factory, app_cache, app_int8_kernel):
    """The command as a course site would run it after a class: with the served app's
    measurement cache (tests/ui/conftest.py), whose quiet results it reads as they are, and what
    is missing measured now (counted as quiet, as the served app's are: ui_helpers.served_env).
    This module's name sorts after test_lessons_*.py, so in a full run the served lessons' tests
    have measured most of SMALL's workloads by then (run two at a time, those that either
    worker ran: the workers' apps share one cache); alone, it measures them all.
    Session-scoped, not module-scoped: pytest runs this module's browser tests with every other
    browser test and its other tests later, and a module fixture would be set up (the whole
    export) once for each group."""
    out = tmp_path_factory.mktemp("site")
    small = [arg for slug, query in SMALL.items() for arg in ("--lesson", f"{slug}?{query}")]
    done = subprocess.run([sys.executable, "-m", "lessons.export", "--all", *small,
                           "--out", str(out)], cwd=ROOT, capture_output=True, text=True,
                          env=served_env(app_cache), timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return out, done.stderr


def test_command_reports_and_writes_every_lesson_and_the_index(site):
    out, said = site
    assert sorted(p.name for p in out.iterdir()) == sorted(
        ["index.html", *(f"{info.slug}.html" for info in LESSONS)])
    # the settings given took: lesson 2's load test sent 10 requests, not its default 40
    assert "Percentiles over 10 requests" in (out / "average-lies.html").read_text()
    assert "knob: sweep_point" in said and "knob: wrote" in said  # progress per job, then the file
    index = (out / "index.html").read_text()
    for info in LESSONS:
        assert f'<a href="{info.slug}.html">Lesson {info.number}: {info.title}</a>' in index


@pytest.mark.parametrize("info", LESSONS, ids=[info.slug for info in LESSONS])
def test_every_lesson_works_from_disk(site, page, console, info):
    out, _ = site
    fetched = []
    page.on("request", lambda r: not r.url.startswith(("file:", "data:", "blob:"))
            and fetched.append(r.url))
    page.goto((out / f"{info.slug}.html").as_uri())
    expect(page.get_by_text(f"Lesson {info.number}: {info.title}").first).to_be_visible(
        timeout=60_000)
    lesson = lesson_class(info)
    text = words(page)
    # the prose: what it measures, what the reader will be able to do, the takeaway
    for line in (info.measures, *lesson.objectives[:1], *lesson.takeaway[:1]):
        assert " ".join(line.split()) in text, line
    assert f"A static copy of lesson {info.number}" in text
    assert re.search(r"measured by the course's engine on \S.* (at|between) \d{4}-\d\d-\d\d "
                     r"\d\d:\d\d", text), "the banner names the device and time"
    assert "Traceback" not in text
    # its charts (lesson 9 has tables only) are drawn and hold the recorded measurements; no
    # readout is left empty
    if '"name":"Figure"' in (out / f"{info.slug}.html").read_text():
        expect(page.locator("canvas").first).to_be_attached()  # drawn after the header shows
        assert max(page.evaluate(SOURCES_JS)) > 0, "no chart has data"
    empty = [v for v in page.locator(".readouts .value").all_inner_texts() if v.strip() == DASH]
    assert empty == [], f"{len(empty)} readouts without a value"

    if lesson.prediction is not None:  # a pick is answered by what was measured
        page.locator("#prediction input").first.check()
        verdict = page.locator(".why-prediction-0")
        expect(verdict).to_be_visible()
        expect(verdict).to_contain_text(re.compile(r"(As you predicted|Not what you predicted)\."
                                                   r" You predicted: .* Measured: "))
    fixed = [q for q in lesson.questions if isinstance(q, Question)]
    if fixed:  # the checkpoint: the right answer says so
        first = fixed[0]
        page.get_by_label(first.answer.text, exact=True).first.check()
        expect(page.get_by_text(f"Right. {first.answer.why}")).to_be_visible()

    # every link leads to an exported file (or out of the course), none to the app
    for href in page.evaluate(LINKS_JS):
        target = urlparse(href)
        if target.scheme in ("http", "https", "mailto", "blob", "data") or href.startswith("#"):
            continue  # out of the course, or a download carried inside the page
        assert not href.startswith("app"), f"a link into the app: {href}"
        assert (out / unquote(target.path)).is_file(), f"a link to a missing file: {href}"
    assert fetched == [], "an exported page fetches nothing"
    assert console.errors == []


def test_lesson_1_says_why_the_browser_clock_is_empty(site, page):
    """No browser received the recorded stream: the page says what its browser's clock would
    show instead of empty readouts, and its token table keeps the engine's clock alone."""
    out, _ = site
    page.goto((out / "two-clocks.html").as_uri())
    expect(page.get_by_text("Your browser's clock").first).to_be_visible(timeout=60_000)
    text = words(page)
    assert "no server streams it to your browser, so there is nothing for your browser's " \
        "clock to time" in text
    assert "no server streams it" in NO_BROWSER_CLOCK  # the words above are the page's
    assert "first token on your screen" not in text  # the live page's readouts are gone
    tokens = re.search(r"The tokens on the engine's clock \((\d+) tokens?", text)
    assert tokens and 1 <= int(tokens.group(1)) <= 8  # the export's setting: max_new_tokens=8
    assert "browser (ms since click)" not in text


def test_knob_works_from_disk_in_detail(site, page, console):
    out, _ = site
    page.goto((out / "knob.html").as_uri())
    expect(page.get_by_text("Two lines, one knob").first).to_be_visible(timeout=60_000)
    text = words(page)
    # the default view's points (batch 8, 4 and 1) in the curve's table, in tokens/s
    assert re.search(r"Points measured so far, mini preset", text)
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
    assert console.errors == []


def test_bad_arguments_say_so_in_one_line(tmp_path, capsys):
    """An unknown lesson or setting, a value its URL would not take, no folder, no lesson:
    status 2, the usage and one error line naming what is wrong, nothing written. The command's
    main in this process: each is refused before any lesson is built or measured (the `site`
    fixture runs the command itself as `python -m lessons.export`)."""
    for args, named in (
            (["--lesson", "nope", "--out", str(tmp_path)], "no lesson called 'nope'"),
            (["--lesson", "knob?nope=1", "--out", str(tmp_path)], "knob has no setting 'nope'"),
            (["--lesson", "knob?batch_size=many", "--all", "--out", str(tmp_path)],
             "which is not a number"),
            (["--all"], "--out"), (["--out", str(tmp_path)], "--lesson")):
        with pytest.raises(SystemExit) as done:
            export_main(args)
        last = capsys.readouterr().err.strip().splitlines()[-1]
        assert done.value.code == 2 and last.startswith("python -m lessons.export: error:")
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
