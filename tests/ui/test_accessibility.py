"""WCAG 2.1 AA in a real browser: axe-core finds no critical or serious violation on any page the
course map links, nor on a lesson embedded with embed=true, nor in the dark theme, each audited
after its demo has drawn (small workloads from the URL, one page load per page).

`python -m pytest -q -s tests/ui/test_accessibility.py` prints one line of axe counts per page."""

from __future__ import annotations

import re

import pytest
from a11y_audit import BLOCKING, audit, blocking_details, summary
from playwright.sync_api import expect
from ui_helpers import skip_prediction

LONG = 240_000  # ms: the engine worker may be starting, and this machine is shared


def draw_two_clocks(page) -> None:
    skip_prediction(page)
    page.get_by_role("button", name="Send").click()
    expect(page.get_by_text(re.compile("TTFT: queued"))).to_be_visible(timeout=LONG)


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


# name -> (path, what to do or wait for before the audit: the demo drawn). Lesson 4 with
# settings the other browser tests do not use, so that they still find its points unmeasured.
AUDITED = {
    "course-map": ("/app", wait_for("How fast is a language model, really?")),
    "two-clocks": ("/app?lesson=two-clocks&max_new_tokens=8", draw_two_clocks),
    "average-lies": ("/app?lesson=average-lies&requests=10&rate=30&long_share=0",
                     skip_then("Percentiles over 10 requests")),
    "three-schedules": ("/app?lesson=three-schedules&requests=6&rate=40&max_batch=2",
                        skip_then("Under static batching the 6 requests")),
    "knob": ("/app?lesson=knob&batch_size=4&prompt_len=24&new_tokens=8",
             skip_then(r"Last doubling, batch 2 to 4")),
    "roofline": ("/app?lesson=roofline&preset=tiny&max_batch=2&max_prompt=64",
                 skip_then(r"the engine took \*?\*?[\d.,]+ ms")),
    "kv-cache": ("/app?lesson=kv-cache", skip_then("All 9 caches agree with the formula.")),
    "chunked-prefill": ("/app?lesson=chunked-prefill&requests=4&output_len=64"
                        "&long_prompt=512&chunk_size=128",
                        skip_then("worst stall|did not shorten|says nothing about chunks")),
    "slo-goodput": ("/app?lesson=slo-goodput&points=2&requests=6&max_rate=8&runs=2",
                    skip_then("Best goodput")),
    "prefix-cache": ("/app?lesson=prefix-cache&shared_prefix=256&requests=2",
                     skip_then(r"x sooner")),
    "speculative": ("/app?lesson=speculative&k=2&batch_size=1",
                    skip_then(r"tokens per target step \(the formula")),
    "quantization": ("/app?lesson=quantization&preset=tiny", skip_then(r"held-out positions")),
    "capacity": ("/app?lesson=capacity&prompt_len=16&output_len=4&rate=200",
                 skip_then(r"\d+ of \d+ requests \(")),
    "about": ("/app?page=about", wait_for(r"\d+(\.\d)? GB/s")),
    "vocabulary": ("/app?page=vocabulary", wait_for("Terms used on every page")),
    "summary": ("/app?page=summary", wait_for("The tuning checklist")),
    "instructor": ("/app?page=instructor", wait_for("Instructor notes")),
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


def test_every_page_the_course_map_links_is_audited(page, app_url):
    """A page added to the navigation without an entry in AUDITED fails here."""
    page.goto(app_url + "/app")
    nav = page.locator("nav.course-nav a")
    expect(nav.first).to_be_visible(timeout=60_000)
    linked = {re.sub(r"^.*?/?app\??", "", href) for href in nav.evaluate_all(
        "links => links.map(a => a.getAttribute('href'))")}
    audited = {re.sub(r"^/app\??", "", path).split("&")[0] for path, _ in AUDITED.values()}
    assert linked - audited == set()


@pytest.mark.parametrize("name", list(AUDITED))
def test_no_critical_or_serious_axe_violations(page, console, app_url, name, request):
    if name == "quantization":
        request.getfixturevalue("app_int8_kernel")  # int8 weights need their kernel built
    path, drawn = AUDITED[name]
    page.goto(app_url + path)
    drawn(page)
    violations = audit(page)
    print(summary(name, violations))
    blocking = [v for v in violations if v["impact"] in BLOCKING]
    assert not blocking, f"{name}: axe finds\n{blocking_details(violations)}"
    assert console.errors == []
