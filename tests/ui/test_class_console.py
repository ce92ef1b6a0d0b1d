"""The class run in two browsers: the teacher starts it from the console with the key, a student
sends a prompt from the student page in another browser context and sees their own time to first
token, and a knob change made on the console (max batch) is marked on its charts and named on the student's
page. One test: the class run's parts are tested without a browser in tests/lessons/classroom."""

from __future__ import annotations

import re
import urllib.request

from a11y_audit import assert_accessible
from helpers import wait_until
from playwright.sync_api import expect
from ui_helpers import TEACHER_KEY, ConsoleLog, assert_clean, source

WAIT_MS = 120_000  # the engine worker may still be setting up the first time: a bound


def test_a_class_run_from_console_to_student(page, console, browser, browser_context_args,
                                             app_url):
    page.goto(app_url + "/app?page=class")
    expect(page.get_by_text("Read-only: the controls need the teacher's key")).to_be_visible(
        timeout=60_000)
    expect(page.get_by_role("button", name="Start the class run")).to_be_disabled()
    page.get_by_label("Teacher's key").fill(TEACHER_KEY)
    page.get_by_role("button", name="Use this key").click()
    expect(page.get_by_text("The controls are yours")).to_be_visible(timeout=10_000)
    page.get_by_role("button", name="Start the class run").click()
    expect(page.get_by_text(re.compile(r"Live for \d+ s"))).to_be_visible(timeout=WAIT_MS)

    student_context = browser.new_context(**browser_context_args)
    try:
        student = student_context.new_page()
        student_console = ConsoleLog(student)
        student.goto(app_url + "/app?page=class-student")
        expect(student.get_by_text("The class run is live")).to_be_visible(timeout=60_000)
        student.get_by_role("textbox", name="Your prompt").fill("The function returns")
        student.get_by_role("button", name="Send", exact=True).click()
        row = student.locator(".own-requests tbody tr").first
        expect(row).to_contain_text("finished", timeout=WAIT_MS)
        ttft = row.locator("td").nth(2).inner_text()
        assert float(ttft.replace(",", "")) > 0, ttft
        wait_until(lambda: sum(source(student, "ttft mine")["count"]) == 1, 30,
                   "the student's TTFT picked out in the class's histogram")

        max_batch = page.get_by_label("Max batch (requests)")
        expect(max_batch).to_be_editable(timeout=60_000)
        max_batch.fill("4")
        max_batch.press("Enter")
        page.get_by_role("button", name="Apply the knobs").click()
        expect(page.get_by_text(re.compile(r"Changed: max batch 4, from"))).to_be_visible(
            timeout=30_000)
        expect(student.get_by_text(re.compile(
            r"At [\d.]+ s the teacher changed: max batch 4"))).to_be_visible(timeout=30_000)
        expect(page.get_by_text(re.compile(r"s: max batch 4 \(by teacher\)"))).to_be_visible(
            timeout=30_000)  # the console's list, drawn in the frame that marks the charts
        marks = source(page, "knob changes")
        assert marks["label"] == ["max batch 4"], marks
        assert_clean(student, student_console)
        assert_accessible(student, "class-student")
        assert_accessible(page, "class")
        page.get_by_role("button", name="Stop the class run").click()
        expect(page.get_by_text("The class run is stopped")).to_be_visible(timeout=30_000)
    finally:
        student_context.close()
        stop = urllib.request.Request(f"{app_url}/class/stop", data=b"{}", method="POST",
                                      headers={"X-Teacher-Key": TEACHER_KEY})
        urllib.request.urlopen(stop, timeout=60).close()  # whatever happened: the engine back
    assert_clean(page, console)
