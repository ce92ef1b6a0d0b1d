"""App interaction latency, measured in a real browser (Playwright driving Debian's Chromium).

Starts `panel serve app.py` (the README's command) on a free port with an empty measurement
cache, then measures three things against their targets:
  1. interactive: from the start of navigation to a lesson's main control being visible and
     enabled, for lessons 1 to 4, in a browser that has opened the app before (its scripts
     cached, as for a reader moving between lessons); each lesson --samples times, in turn.
     Target: 3 s. The first view in a fresh browser profile (nothing cached) is reported too,
     without a target.
  2. uncached point: on the knob (its default preset, KNOB_PRESET, and measurement settings), the
     reader releases the slider at a batch size nobody has measured; from the key press to
     the new point being in the chart's data in the browser (checked every animation frame,
     so it is drawn by the next paint). Target: 5 s.
  3. cached point: a second reader (a new browser session) releases the slider at batch sizes
     the first reader measured: the engine service answers from its cache. Target: 300 ms.
The slider is moved with the keyboard (a key press sets the slider's throttled value, as a
mouse release does). Prints every sample, a table and the harness's JSON result
(bench/harness.py: the targets met or MISSED, the machine's load average before and after, the
log line).

    python bench/web/ui_latency.py [--samples 3] [--url http://localhost:5006]  (an already running
    server instead of a fresh one: its cache may hold the "uncached" points, see the JSON)
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: engine, bench

from bench.harness import Run  # noqa: E402
from bench.web.served_app import (
    CHROMIUM,
    CHROMIUM_ARGS,
    SKIP_PREDICTION,
    start_server,
    stop_server,
)
from lessons.knob import DEFAULT_PRESET  # noqa: E402

TARGETS_MS = {"interactive": 3000.0, "uncached_point": 5000.0, "cached_point": 300.0}
KNOB_PRESET = DEFAULT_PRESET  # what the knob's points measure by default
START_BATCH = 4

# Each lesson's main control: the page is interactive once it is visible and enabled.
CONTROLS = {
    "two-clocks": ("role", "button", "Send"),
    "average-lies": ("role", "button", "Run the load test"),
    "three-schedules": ("role", "button", "continuous"),
    "knob": ("css", ".noUi-handle", None),
}

# Resolves, at the first animation frame where the chart's points include `batch`, with that
# frame's performance.now().
POINT_DRAWN_JS = """(batch) => {
  for (const doc of Bokeh.documents) {
    const model = doc.get_model_by_name('points');
    if (model) {
      const data = model.data instanceof Map ? model.data.get('batch') : model.data.batch;
      if (Array.from(data).includes(batch)) { return performance.now(); }
    }
  }
  return false;
}"""


def control(page, slug: str):
    how, what, name = CONTROLS[slug]
    return page.get_by_role(what, name=name) if how == "role" else page.locator(what).first


def time_interactive(page, url: str, slug: str) -> float:
    """ms from the start of navigation to the lesson's main control visible and enabled."""
    from playwright.sync_api import expect

    start = time.perf_counter()
    page.goto(f"{url}/app?lesson={slug}", wait_until="commit")
    target = control(page, slug)
    expect(target).to_be_visible(timeout=60_000)
    expect(target).to_be_enabled(timeout=60_000)
    return 1000 * (time.perf_counter() - start)


def time_cold(browser, url: str, slug: str) -> float:
    """The same in a fresh browser profile: every script and stylesheet downloaded first."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    try:
        return time_interactive(context.new_page(), url, slug)
    finally:
        context.close()


def open_knob(browser, url: str, batch: int):
    from playwright.sync_api import expect

    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.goto(f"{url}/app?lesson=knob&batch_size={batch}")
    page.get_by_role("button", name=SKIP_PREDICTION).click(timeout=60_000)  # or nothing runs
    half = batch // 2
    expect(page.get_by_text(f"Last doubling, batch {half} to {batch}")).to_be_visible(
        timeout=180_000)
    return context, page


def release_at_next(page, batch: int, timeout_ms: float) -> float:
    """Press the right arrow on the slider (batch - 1 -> batch) and return ms from the press
    to the first animation frame whose chart data holds the new point."""
    handle = page.locator(".noUi-handle").first
    handle.focus()
    start = page.evaluate("() => performance.now()")
    handle.press("ArrowRight")
    drawn = page.wait_for_function(POINT_DRAWN_JS, arg=batch, polling="raf",
                                   timeout=timeout_ms).json_value()
    return drawn - start


def wait_idle(page, batch: int) -> None:
    """Until the page has what it asked for (the point and its half: the doubling readout)."""
    from playwright.sync_api import expect

    expect(page.get_by_text(f"Last doubling, batch {batch // 2} to {batch}")).to_be_visible(
        timeout=180_000)


def summarize(samples: list[float], target: float) -> dict:
    return {"samples_ms": [round(s, 1) for s in samples],
            "median_ms": round(statistics.median(samples), 1) if samples else None,
            "max_ms": round(max(samples), 1) if samples else None,
            "target_ms": target,
            "met": bool(samples) and max(samples) <= target}


def move_over_new_points(browser, url: str, bench, samples: int, kind: str) -> dict:
    """A reader's session releases the knob at the `samples` batch sizes above START_BATCH, one
    after another, each round printed; the release-to-point times against the kind's target."""
    context, page = open_knob(browser, url, START_BATCH)
    times = []
    for i in range(samples):
        batch = START_BATCH + 1 + i
        times.append(release_at_next(page, batch, 60_000))
        bench.round({kind: batch, "ms": round(times[-1], 1)})
        wait_idle(page, batch)
    context.close()
    return summarize(times, TARGETS_MS[kind])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=3, help="slider moves per kind of point")
    parser.add_argument("--url", default=None, help="use this running server instead")
    args = parser.parse_args(argv)
    from playwright.sync_api import sync_playwright

    bench = Run("ui_latency", args)
    proc = None
    cache = tempfile.mkdtemp(prefix="ui-latency-cache-")
    if args.url:
        url = args.url.rstrip("/")
    else:
        proc, url = start_server(cache)
    results: dict = {}
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS,
                                        headless=True)
            # warm-up: the first page view imports the pages and starts the engine worker
            cold = {slug: round(time_cold(browser, url, slug), 1) for slug in CONTROLS}
            context = browser.new_context(viewport={"width": 1280, "height": 900})
            reader = context.new_page()
            reader.goto(f"{url}/app")
            samples: dict[str, list[float]] = {slug: [] for slug in CONTROLS}
            for _ in range(args.samples):
                for slug in CONTROLS:
                    samples[slug].append(time_interactive(reader, url, slug))
                    bench.round({"interactive": slug, "ms": round(samples[slug][-1], 1)})
                    reader.goto(f"{url}/app")  # leave: the lesson's session and jobs end
            context.close()
            results["interactive"] = {slug: summarize(s, TARGETS_MS["interactive"])
                                      for slug, s in samples.items()}
            results["interactive_first_view_ms"] = cold
            # reader A: a fresh session; every release lands on a batch size nobody measured
            results["uncached_point"] = move_over_new_points(browser, url, bench, args.samples,
                                                             "uncached_point")
            # reader B: another session moves over the points A measured (the service's cache)
            results["cached_point"] = move_over_new_points(browser, url, bench, args.samples,
                                                           "cached_point")
            version = browser.version
            browser.close()
    finally:
        if proc is not None:
            stop_server(proc)
    report = {
        "server": "given --url (cache state unknown)" if args.url else "fresh panel serve, "
                  "empty cache",
        "chromium": version,
        "preset": KNOB_PRESET, "knob_start_batch": START_BATCH,
        **results,
    }
    rows = [(f"lesson {slug} interactive", r) for slug, r in results["interactive"].items()]
    rows += [(f"uncached {KNOB_PRESET} point drawn", results["uncached_point"]),
             ("cached point drawn", results["cached_point"])]
    print(f"{'what':<36} {'median ms':>10} {'max ms':>10} {'target ms':>10}")
    for what, r in rows:
        print(f"{what:<36} {r['median_ms']:>10.0f} {r['max_ms']:>10.0f} "
              f"{r['target_ms']:>10.0f}")
        bench.target(f"{what}: slowest ms", r["max_ms"], at_most=r["target_ms"])
    print("first view in a fresh browser profile (no target): "
          + ", ".join(f"{k} {v:.0f} ms" for k, v in results["interactive_first_view_ms"].items()))
    return bench.finish(report)


if __name__ == "__main__":
    sys.exit(main())
