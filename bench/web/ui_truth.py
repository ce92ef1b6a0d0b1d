"""Do the pages show what the engine measures? What a page shows in Chromium, against the CLI on
the same settings, in one run.

Each round starts `panel serve app.py` (the README's command) with an empty measurement cache and
drives Debian's Chromium with Playwright:
  1. lesson 1 (two clocks), default prompt and answer length, one Send: the engine-clock TPOT the
     page shows (its E2E note) against `python -m engine generate` on the same prompt;
  2. lesson 4 (the knob), default settings: the ms per token the chart holds at batch 1, 8 and
     64 against `python -m engine sweep --batch-sizes 1,8,64` on the same settings;
  3. lesson 7 (chunked prefill), default settings, fresh from the page: worst gap whole / chunked
     as the page states it.
The CLI runs twice per round, right after the page's measurements: pinned like the engine worker
(`taskset` to the engine's cores, ENGINE_THREADS = their count: the like-for-like figure, the
target) and free on every core. Ratios page / CLI are printed per round; target 1.25x; lesson
7's worst gap whole / chunked at least 3x.
Then one hog run (unless --no-hog): a fresh server, lesson 4 at batch 64, and a busy loop on every
core started as the page begins measuring and stopped after --hog-s seconds: the page must say
DISTURBED (or re-measuring), and the cache must hold no disturbed result.
The browser stands for a reader's own machine: Chromium, Playwright and this script are pinned to
the web server's cores (the server itself starts on every core and splits them as it does in
class), so on a 2-core host they do not take the engine's core; --browser-anywhere leaves them
free, to see what a browser on the same cores does to the numbers.
Prints every round and the harness's JSON result (bench/harness.py: targets met or MISSED, the
machine's load average before and after, the log line). Run it on a quiet machine.

    python bench/web/ui_truth.py [--rounds 3] [--no-hog] [--hog-s 25] [--browser-anywhere]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.harness import Run  # noqa: E402
from bench.web import ui_latency  # noqa: E402
from bench.web.served_app import CHROMIUM, CHROMIUM_ARGS, PAGE_TEXT_JS, SKIP_PREDICTION, stop_server  # noqa: E402
from engine.lab import cores  # noqa: E402
from lessons.knob import DEFAULT_NEW_TOKENS, DEFAULT_PRESET, DEFAULT_PROMPT_LEN  # noqa: E402
from lessons.two_clocks import DEFAULT_PROMPT  # noqa: E402

TARGET = 1.25
BATCHES = (1, 8, 64)
ANSWER_TOKENS = 48  # lesson 1's default answer length
TIMEOUT_MS = 300_000

# The knob chart's points as the browser holds them: {batch: ms per token}.
KNOB_POINTS_JS = """() => {
  for (const doc of Bokeh.documents) {
    const model = doc.get_model_by_name('points');
    if (model) {
      const get = (k) => Array.from(model.data instanceof Map ? model.data.get(k) : model.data[k]);
      const out = {};
      get('batch').forEach((b, i) => { out[b] = get('ms_per_token')[i]; });
      return out;
    }
  }
  return {};
}"""


def skip_prediction(page) -> None:
    """Every lesson measures nothing fresh before its reader predicts or skips (lessons.base):
    skip, as a reader in a hurry does, so the page measures."""
    page.get_by_role("button", name=SKIP_PREDICTION).click(timeout=TIMEOUT_MS)


def page_text(page) -> str:
    return page.evaluate(PAGE_TEXT_JS, None)


def wait_text(page, pattern: str, timeout_s: float = TIMEOUT_MS / 1000) -> re.Match:
    """Poll the page's text (shadow DOMs included) until the regex matches."""
    deadline = time.monotonic() + timeout_s
    while True:
        found = re.search(pattern, page_text(page))
        if found:
            return found
        if time.monotonic() > deadline:
            raise TimeoutError(f"the page never showed /{pattern}/")
        page.wait_for_timeout(500)


ALL_CORES = cores.available_cores()


def disturbed_label(text: str) -> str:
    """The page's DISTURBED label with its reason, or '' when it shows none."""
    found = re.search(r"DISTURBED: [^;]*", text)
    return found.group(0) if found else ""


def engine_split() -> cores.CoreSplit:
    """The cores the app's engine worker takes on this machine (ENGINE_CORES or auto)."""
    return cores.plan(cores.available_cores(), os.environ.get(cores.ENV, "auto"))


def start_server(cache: str):
    """`panel serve` on every core this script may use (it splits them itself), even while this
    process is pinned to the web's cores."""
    mine = os.sched_getaffinity(0)
    os.sched_setaffinity(0, ALL_CORES)
    try:
        return ui_latency.start_server(cache)
    finally:
        os.sched_setaffinity(0, mine)


def pinned_chromium(web: tuple[int, ...]) -> str:
    """A wrapper that starts Chromium on the web's cores (Playwright takes an executable)."""
    path = Path(tempfile.mkdtemp(prefix="ui-truth-")) / "chromium"
    path.write_text(f'#!/bin/sh\nexec taskset -c {",".join(map(str, web))} {CHROMIUM} "$@"\n')
    path.chmod(0o755)
    return str(path)


def cli(args: list[str], pinned: bool, cache: str) -> dict:
    """`python -m engine ... --json`, pinned to the engine's cores like the worker, or free; on
    the served app's cache, so both find the same built kernels (or none) and pick the same
    attention backend."""
    env = {**os.environ, "LLM_SPEED_CACHE": cache}
    command = [sys.executable, "-m", "engine", *args, "--json"]
    on = ALL_CORES
    if pinned:
        on = engine_split().engine
        env["ENGINE_THREADS"] = str(len(on))
    command = ["taskset", "-c", ",".join(map(str, on)), *command]
    out = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


@contextmanager
def open_lesson(browser, url: str, query: str):
    """A fresh browser context on `/app?<query>`, past the lesson's prediction; closed after."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    try:
        page = context.new_page()
        page.goto(f"{url}/app?{query}")
        skip_prediction(page)
        yield page
    finally:
        context.close()


def lesson1(browser, url: str) -> dict:
    with open_lesson(browser, url, "lesson=two-clocks") as page:
        send = page.get_by_role("button", name="Send")
        send.wait_for(state="visible", timeout=TIMEOUT_MS)
        page.wait_for_timeout(1000)  # the page's own start-up settles
        send.click()
        m = wait_text(page, r"TTFT \+ \(N - 1\) x TPOT = ([\d.,]+) \+ (\d+) x ([\d.]+) =")
        text = page_text(page)
        return {"tpot_ms": float(m.group(3)), "tokens": int(m.group(2)) + 1,
                "disturbed": disturbed_label(text)}


def knob(browser, url: str, batch: int) -> tuple[dict[int, float], bool]:
    """Open lesson 4 at `batch`; the chart's points once it has all it asks for (batch, its
    half and 1)."""
    with open_lesson(browser, url, f"lesson=knob&batch_size={batch}") as page:
        wait_text(page, f"Last doubling, batch {batch // 2} to {batch}: total" if batch > 1
                  else "Batch 1 is where the curve starts")
        return chart_points(page, batch, batch // 2 or 1, 1), "DISTURBED" in page_text(page)


def chart_points(page, *batches: int) -> dict[int, float]:
    """The knob chart's points once they include every one of `batches` (a re-measured point
    comes once, when measured again)."""
    deadline = time.monotonic() + TIMEOUT_MS / 1000
    while True:
        points = {int(b): ms for b, ms in page.evaluate(KNOB_POINTS_JS).items()}
        if set(batches) <= set(points) or time.monotonic() > deadline:
            return points
        page.wait_for_timeout(500)


def lesson7(browser, url: str) -> dict:
    with open_lesson(browser, url, "lesson=chunked-prefill") as page:
        whole = wait_text(page, r"whole[^:]*:\s*worst gap\s*([\d.,]+)\s*ms")
        chunked = wait_text(page, r"chunks of \d+ tokens:\s*worst gap\s*([\d.,]+)\s*ms")
        w, c = (float(x.group(1).replace(",", "")) for x in (whole, chunked))
        return {"worst_whole_ms": w, "worst_chunked_ms": c, "ratio": w / c,
                "disturbed": disturbed_label(page_text(page))}


def one_round(browser, rnd: int) -> dict:
    cache = tempfile.mkdtemp(prefix="ui-truth-cache-")
    proc, url = start_server(cache)
    row: dict = {"round": rnd}
    try:
        l1 = lesson1(browser, url)
        points, disturbed = knob(browser, url, 64)
        more, disturbed8 = knob(browser, url, 8)
        page_points = {b: (more | points)[b] for b in BATCHES}
        l7 = lesson7(browser, url)
    finally:
        stop_server(proc)
    gen_args = ["generate", "--prompt", DEFAULT_PROMPT, "--max-new-tokens", str(ANSWER_TOKENS)]
    sweep_args = ["sweep", "--preset", DEFAULT_PRESET, "--batch-sizes",
                  ",".join(map(str, BATCHES)), "--prompt-len", str(DEFAULT_PROMPT_LEN),
                  "--new-tokens", str(DEFAULT_NEW_TOKENS)]
    for how, pinned in (("pinned", True), ("free", False)):
        gen = cli(gen_args, pinned, cache)
        sweep = {p["batch_size"]: p["tpot_ms"] for p in cli(sweep_args, pinned, cache)["points"]}
        row[how] = {"generate_tpot_ms": gen["tpot_ms"], "sweep_tpot_ms": sweep}
    row["page"] = {"lesson1": l1, "knob_ms_per_token": page_points,
                   "knob_disturbed": disturbed or disturbed8, "lesson7": l7}
    row["ratios"] = {how: {"lesson1": l1["tpot_ms"] / row[how]["generate_tpot_ms"],
                           **{f"knob_b{b}": page_points[b] / row[how]["sweep_tpot_ms"][b]
                              for b in BATCHES}}
                     for how in ("pinned", "free")}
    print(f"round {rnd}: lesson 1 TPOT page {l1['tpot_ms']:.2f} ms, generate pinned "
          f"{row['pinned']['generate_tpot_ms']:.2f} / free {row['free']['generate_tpot_ms']:.2f}"
          f"{'  [page: ' + l1['disturbed'] + ']' if l1['disturbed'] else ''}", flush=True)
    for b in BATCHES:
        print(f"round {rnd}: lesson 4 batch {b:>2}: page {page_points[b]:.2f} ms/token, sweep "
              f"pinned {row['pinned']['sweep_tpot_ms'][b]:.2f} / free "
              f"{row['free']['sweep_tpot_ms'][b]:.2f}", flush=True)
    print(f"round {rnd}: lesson 7 worst gap whole {l7['worst_whole_ms']:.0f} ms / chunked "
          f"{l7['worst_chunked_ms']:.0f} ms = {l7['ratio']:.2f}x"
          f"{'  [page: ' + l7['disturbed'] + ']' if l7['disturbed'] else ''}", flush=True)
    print(f"round {rnd}: page / CLI ratios: " + "; ".join(
        f"{how}: " + ", ".join(f"{k} {v:.2f}" for k, v in row["ratios"][how].items())
        for how in ("pinned", "free")), flush=True)
    return row


def hog_run(browser, hog_s: float) -> dict:
    """Lesson 4 at batch 64 with a busy loop on every core: labelled, and nothing disturbed
    cached."""
    cache = tempfile.mkdtemp(prefix="ui-truth-hog-")
    proc, url = start_server(cache)
    hogs: list[subprocess.Popen] = []
    try:
        with open_lesson(browser, url, "lesson=knob&batch_size=64") as page:
            hogs = [subprocess.Popen(["taskset", "-c", str(c), sys.executable, "-c",
                                      "while True: pass"]) for c in ALL_CORES]
            label = wait_text(page, r"DISTURBED[^;]*;[^.;]*|re-measuring[^.;]*",
                              timeout_s=hog_s + 120).group(0)
            time.sleep(hog_s)
            for h in hogs:
                h.kill()
            points = chart_points(page, 64)  # measured again once quiet, or final and disturbed
            final = re.search(r"DISTURBED[^;]*;[^.;]*", page_text(page))
    finally:
        for h in hogs:
            h.kill()
            h.wait()
        stop_server(proc)
    entries = [json.loads(p.read_text()) for p in Path(cache).rglob("*.json")]
    results = [e["result"] for e in entries if isinstance(e, dict) and "result" in e]
    disturbed_cached = [r for r in results if (r.get("check") or {}).get("disturbed")]
    row = {"label": label, "final_label": final.group(0) if final else "",
           "point_shown": 64 in points, "cache_entries": len(results),
           "disturbed_cached": len(disturbed_cached)}
    print(f"hog run: while the hog ran the page said {label!r}; at the end "
          f"{row['final_label'] or 'no DISTURBED label (measured again when quiet)'!r}, batch 64 "
          f"{'shown' if row['point_shown'] else 'not shown'}; cache holds {len(results)} "
          f"results, {len(disturbed_cached)} of them disturbed", flush=True)
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--no-hog", action="store_true", help="skip the hog run")
    parser.add_argument("--hog-s", type=float, default=25.0, help="how long the hog runs (s)")
    parser.add_argument("--browser-anywhere", action="store_true",
                        help="do not pin Chromium and this script to the web server's cores")
    args = parser.parse_args(argv)
    from playwright.sync_api import sync_playwright

    bench = Run("ui_truth", args)
    split = engine_split()
    print(f"engine cores {list(split.engine)}, web cores {list(split.web)} ({split.note})",
          flush=True)
    out: dict = {"engine_cores": list(split.engine),
                 "browser_pinned": not args.browser_anywhere, "target": TARGET,
                 "rounds": bench.rounds}
    chromium = CHROMIUM
    if split.isolated and not args.browser_anywhere:
        os.sched_setaffinity(0, split.web)  # this script and Playwright's driver
        chromium = pinned_chromium(split.web)
        print(f"Chromium and this script pinned to cores {list(split.web)}", flush=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS, headless=True)
        try:
            for rnd in range(1, args.rounds + 1):
                bench.round(one_round(browser, rnd), f"round {rnd} done")
            if not args.no_hog:
                out["hog"] = hog_run(browser, args.hog_s)
                bench.target("hog run: disturbed results in the cache",
                             out["hog"]["disturbed_cached"], at_most=0)
        finally:
            browser.close()
    summary = {}
    for key in out["rounds"][0]["ratios"]["pinned"]:
        for how in ("pinned", "free"):
            values = [r["ratios"][how][key] for r in out["rounds"]]
            summary[f"{key} {how}"] = {"median": statistics.median(values), "max": max(values),
                                       "within_target": max(values) <= TARGET}
            if how == "pinned":  # the like-for-like figure is the target
                bench.target(f"page / CLI {key}, pinned like the worker: the largest",
                             max(values), at_most=TARGET)
    gaps = [r["page"]["lesson7"]["ratio"] for r in out["rounds"]]
    summary["lesson7 worst gap ratio"] = {"values": gaps, "all_at_least_3": min(gaps) >= 3}
    bench.target("lesson 7 worst gap whole / chunked: the smallest", min(gaps), at_least=3.0)
    out["summary"] = summary
    for key, value in summary.items():
        print(f"{key}: {value}", flush=True)
    return bench.finish(out)


if __name__ == "__main__":
    sys.exit(main())
