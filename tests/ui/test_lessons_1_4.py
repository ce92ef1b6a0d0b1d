"""Lessons 1 to 4 in a real browser, with small workloads from the URL: a prompt streams tokens and
a TTFT; a load test fills a percentile table with P99 at or above P50; switching policy re-times
the lanes; moving the slider adds a measured point. No page shows a traceback and the console
stays clean. Each test ends with its lesson's accessibility audit on the page it drew (axe: no
critical or serious WCAG 2.1 AA violation; test_accessibility.py audits the other pages), so one
page load and one measurement serve both."""

from __future__ import annotations

import re

from a11y_audit import assert_accessible
from playwright.sync_api import expect
from ui_helpers import LONG, assert_clean, page_text, skip_prediction, source


def number_in(text: str, label: str) -> float:
    """The number just before `label` in the page's text (readouts: value, then what it is)."""
    match = re.search(r"([\d,]+(?:\.\d+)?) ms\s+" + re.escape(label), text)
    assert match, f"no value before {label!r}"
    return float(match.group(1).replace(",", ""))


def test_two_clocks_streams_tokens_and_shows_ttft_on_both_clocks(page, console, app_url):
    page.goto(f"{app_url}/app?lesson=two-clocks&max_new_tokens=8")
    send = page.get_by_role("button", name="Send")
    expect(send).to_be_enabled(timeout=60_000)
    # a click while the prompt's edit is still on its way: Panel runs it off the document lock
    page.get_by_role("textbox", name="Your prompt").fill("The engine reads the prompt")
    skip_prediction(page)
    send.click()
    expect(page.get_by_text(re.compile("The same tokens on both clocks"))).to_be_visible(
        timeout=LONG)
    expect(page.get_by_text("first token on your screen, from your click")).to_be_visible()
    # the table fills as tokens stream in; the readouts' notes come with the finished result
    expect(page.get_by_text(re.compile("TTFT: queued"))).to_be_visible(timeout=LONG)
    text = page_text(page)
    assert number_in(text, "TTFT: queued") > 0
    ticks = source(page, "ticks engine")
    assert len(ticks["x"]) == 8 and ticks["x"] == sorted(ticks["x"])
    # the browser stamped the same tokens on its own clock, after the engine's
    page.wait_for_function(
        "() => Bokeh.documents.some(d => { const m = d.get_model_by_name('ticks your browser');"
        " return m && m.data.x.length == 8; })", timeout=30_000)
    browser = source(page, "ticks your browser")
    assert browser["index"] == list(range(8)) and min(browser["x"]) > 0
    text = page_text(page)
    assert number_in(text, "first token on your screen") >= number_in(text, "TTFT: queued")
    assert_clean(page, console)
    assert_accessible(page, "two-clocks")


def test_average_lies_fills_the_percentile_table(page, console, app_url):
    page.goto(f"{app_url}/app?lesson=average-lies&requests=10&rate=30&long_share=0")
    skip_prediction(page)
    expect(page.get_by_text("Percentiles over 10 requests (ms)")).to_be_visible(timeout=LONG)
    row = page.locator("tr", has_text="E2E (to last token)").first.inner_text()
    # each cell: the figure, then its [95% interval] or † (too few requests); then the count
    cells = [float(re.match(r"[\d,.]+", c).group().replace(",", ""))
             for c in row.split("\t")[1:7]]
    p50, mean, p90, p95, p99, top = cells
    assert row.split("\t")[7].strip() == "10 requests" and "\u2020" in row  # P99 of 10
    assert p99 >= p95 >= p90 >= p50 > 0 and top >= p99
    expect(page.get_by_text("The five slowest requests by E2E")).to_be_visible()
    expect(page.get_by_text("quoted example (ms)")).to_be_visible()
    assert "random weights" not in page_text(page)  # the trained tiny model served it
    assert_clean(page, console)
    assert_accessible(page, "average-lies")


def admitted_while_another_runs(lanes: dict) -> bool:
    """Whether some request entered the batch while one admitted before it was still running."""
    admitted, finished = {}, {}
    for rid, right, part in zip(lanes["id"], lanes["right"], lanes["part"]):
        if part == "queued":
            admitted[rid] = right
        elif part == "decode":
            finished[rid] = right
    return any(admitted[j] < admitted[i] < finished[j] for i in admitted for j in admitted)


def test_three_schedules_switching_policy_changes_the_lanes(page, console, app_url):
    page.goto(f"{app_url}/app?lesson=three-schedules&requests=6&rate=40&max_batch=2")
    skip_prediction(page)
    # the summary under the lanes (the status widget's live region says the same words)
    summary = page.locator(".lanes-summary")
    expect(summary.get_by_text(re.compile("Under static batching the 6 requests"))).to_be_visible(
        timeout=LONG)
    static = source(page, "lanes")
    page.get_by_role("button", name="continuous").click()
    expect(summary.get_by_text(re.compile("Under continuous batching the 6 requests"))
           ).to_be_visible(timeout=LONG)
    expect(page).to_have_url(re.compile("policy=continuous"))
    continuous = source(page, "lanes")
    assert static != continuous
    # what each schedule means, read off the lanes (not a timing claim: those are in bench/)
    assert not admitted_while_another_runs(static)  # a batch runs to its end before the next
    assert admitted_while_another_runs(continuous)  # a freed slot is refilled at once
    table = page.locator("tr", has_text="continuous").last.inner_text()
    assert "not run yet" not in table
    # closed loop: concurrent users, each sending again when answered
    page.get_by_role("button", name="closed loop: concurrent users").click()
    expect(page.locator(".measurement-label").get_by_text(
        re.compile("a closed loop of 4 concurrent users"))).to_be_visible(timeout=LONG)
    expect(page).to_have_url(re.compile("load=closed"))
    assert_clean(page, console)
    assert_accessible(page, "three-schedules")


def test_knob_slider_adds_a_measured_point(page, console, app_url):
    page.goto(f"{app_url}/app?lesson=knob&batch_size=4&prompt_len=16&new_tokens=8")
    skip_prediction(page)
    expect(page.get_by_text(re.compile(r"Last doubling, batch 2 to 4"))).to_be_visible(
        timeout=LONG)
    expect(page.get_by_text(re.compile(r"Against batch 1"))).to_be_visible(timeout=LONG)
    assert sorted(source(page, "points")["batch"]) == [1, 2, 4]
    handle = page.locator(".noUi-handle").first
    handle.focus()
    handle.press("ArrowRight")  # batch 5, measured on release
    expect(page.get_by_text(re.compile(r"Last doubling, batch 2 to 5"))).to_be_visible(
        timeout=LONG)
    expect(page).to_have_url(re.compile("batch_size=5"))
    points = source(page, "points")
    assert 5 in points["batch"]
    assert points["tokens_per_s"][points["batch"].index(5)] > 0
    assert source(page, "you are here")["batch"] == [5]
    expect(page.locator("tr", has_text="measured live").first).to_be_visible()
    assert_clean(page, console)
    assert_accessible(page, "knob")
