"""Helpers shared by the browser tests: serving the app in a subprocess, page text through
shadow DOMs, console errors, live regions. A plain module: tests import it by name, never a
conftest."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import warnings
from contextlib import contextmanager
from pathlib import Path

from bench.web.served_app import PAGE_TEXT_JS as TEXT_JS  # the benches read a page's text alike
from bench.web.served_app import ROOT, free_port, wait_for_http
from bench.web.served_app import stop_server as stop
from engine.lab import cores
from engine.lab.quality import ASSUME_QUIET_ENV


class ConsoleLog:
    """Console errors and uncaught page errors of a page, for the no-error assertions."""

    def __init__(self, page):
        self.errors: list[str] = []
        page.on("console", lambda m: m.type == "error" and self.errors.append(
            f"{m.text} ({m.location.get('url') or 'no url'})"))
        page.on("pageerror", lambda e: self.errors.append(f"uncaught: {e}"))


def page_text(page_or_frame) -> str:
    return page_or_frame.evaluate(TEXT_JS, None)


# How long a browser test waits for a measurement (ms): the first job of a session may wait for
# the engine worker to start, and a CI machine is shared. A bound for a stuck page, not a timing.
LONG = 240_000

# The data of a named Bokeh ColumnDataSource in the page (BokehJS's own model, as drawn).
SOURCE_JS = """(name) => {
  for (const doc of Bokeh.documents) {
    const model = doc.get_model_by_name(name);
    if (model) {
      const entries = model.data instanceof Map ? [...model.data] : Object.entries(model.data);
      return Object.fromEntries(entries.map(([k, v]) => [k, Array.from(v)]));
    }
  }
  return null;
}"""


def source(page, name: str) -> dict[str, list]:
    """The columns of the page's data source named `name`; fails if there is none."""
    data = page.evaluate(SOURCE_JS, name)
    assert data is not None, f"no data source named {name!r} in the page"
    return {k: list(v) for k, v in data.items()}


def assert_clean(page, console) -> None:
    """No traceback in the page's text and no console error."""
    assert "Traceback" not in page_text(page)
    assert console.errors == []


def element_text(locator) -> str:
    """The text of the element a locator finds, its shadow DOM included."""
    return locator.evaluate(TEXT_JS)


# Everything polite live regions (role=status) say, in order, kept in window.__said: Panel and
# Bokeh render into shadow roots, so every shadow root is watched as it is attached. A test asks
# whether something was said, not what the region holds at that moment (the region throttles, and
# a later message replaces an earlier one after a short gap).
RECORD_LIVE_JS = """(() => {
  window.__said = [];
  const region = (node) => {
    for (let n = node; n; n = n.parentNode || n.host) {
      if (n.getAttribute && n.getAttribute('role') === 'status'
          && n.getAttribute('aria-live') === 'polite') return n;
    }
    return null;
  };
  const words = (root) => {  // its text, not its stylesheets'
    let text = '';
    const walker = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
    while (walker.nextNode()) {
      const parent = walker.currentNode.parentNode.nodeName;
      if (parent !== 'STYLE' && parent !== 'SCRIPT') text += walker.currentNode.textContent;
    }
    return text.trim();
  };
  const record = (mutations) => {
    for (const m of mutations) {
      const el = region(m.target);
      if (!el) continue;
      const text = words(el.shadowRoot || el);
      if (text && window.__said[window.__said.length - 1] !== text) window.__said.push(text);
    }
  };
  const watch = (root) => new MutationObserver(record).observe(
      root, {subtree: true, childList: true, characterData: true});
  const attach = Element.prototype.attachShadow;
  Element.prototype.attachShadow = function (init) {
    const root = attach.call(this, init);
    watch(root);
    return root;
  };
  document.addEventListener('DOMContentLoaded', () => watch(document.body));
})();"""

SAID_JS = "(pattern) => window.__said.some(text => new RegExp(pattern).test(text))"


def record_live_regions(page) -> None:
    """From the next page load on, keep what the page's live regions say (see said_so)."""
    page.add_init_script(RECORD_LIVE_JS)


def said_so(page, pattern: str, timeout_ms: float = 10_000) -> None:
    """Wait until a live region has said something matching `pattern` (a JS regular
    expression); fails with what was said."""
    try:
        page.wait_for_function(SAID_JS, arg=pattern, timeout=timeout_ms)
    except Exception as error:
        said = page.evaluate("() => window.__said")
        raise AssertionError(f"no live region said /{pattern}/; they said: {said}") from error


SKIP_PREDICTION = "Skip the prediction and measure"
TEACHER_KEY = "ui-test-teacher-key"  # the served app's (conftest.app_url): the class console's


def skip_prediction(page_or_frame) -> None:
    """A lesson measures nothing fresh until the reader predicts or skips: skip."""
    page_or_frame.get_by_role("button", name=SKIP_PREDICTION).click()


STOP_S = 5.0  # a served app stops within this long of Ctrl-C (it takes about a second)


def stop_promptly(proc: subprocess.Popen, what: str) -> None:
    """Stop a served process with Ctrl-C (bench/web/served_app.py); a warning in the run's summary
    if it took more than STOP_S, saying whether SIGINT was ignored or blocked in it (a process
    inherits either from whatever started it), so a slow session teardown names its cause. A
    warning, not an error: the session's last test would be charged with it."""
    ignored = sigint_ignored(proc.pid)
    took = stop(proc)
    if took > STOP_S:
        warnings.warn(f"{what} (pid {proc.pid}) took {took:.1f} s to stop after Ctrl-C, not "
                      f"{STOP_S:.0f}; SIGINT ignored or blocked in it: {ignored}", stacklevel=2)


def sigint_ignored(pid: int) -> bool | None:
    """Whether a process ignores or blocks SIGINT (its /proc status's SigIgn and SigBlk masks,
    both inherited through fork and exec); None if it is gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    masks = [int(line.split()[1], 16) for line in status.splitlines()
             if line.startswith(("SigIgn:", "SigBlk:"))]
    return any(mask >> (signal.SIGINT - 1) & 1 for mask in masks)


def die_with_parent() -> None:
    """In the server's process: get SIGTERM when pytest dies, even killed by a timeout, so no
    orphaned server (and its engine worker, holding the KV pool) outlives the test run."""
    import ctypes

    PR_SET_PDEATHSIG = 1
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def engine_cores_setting() -> str | None:
    """The engine's cores ($ENGINE_CORES) for what this pytest process serves, or None for the
    environment's own. The browser tests run two at a time (`python -m tests`: one pytest-xdist
    worker each, each with its own served app and Chromium): the odd-numbered worker's engine
    takes the cores the even one's web server and Chromium run on and the other way round, so
    each core carries one engine and one web side, not both engines on one core and both
    browsers on the other. A developer's own $ENGINE_CORES is kept."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    if os.environ.get(cores.ENV) or not worker[2:].isdigit() or int(worker[2:]) % 2 == 0:
        return None
    split = cores.plan(cores.available_cores(), "auto")
    if not split.isolated:
        return None
    return ",".join(f"{core}-{core}" for core in split.web)  # a list, never a count of cores


def served_env(cache: Path) -> dict[str, str]:
    """The environment of a process the browser tests start that measures (a served app, the
    static export): its own results cache, this worker's engine cores, and every measurement
    counted as quiet (engine.lab.quality.ASSUME_QUIET_ENV), so a page's cached results and
    re-measures do not depend on what the other worker's app runs meanwhile."""
    env = {**os.environ, "LLM_SPEED_CACHE": str(cache), ASSUME_QUIET_ENV: "1"}
    setting = engine_cores_setting()
    if setting:
        env[cores.ENV] = setting
    return env


@contextmanager
def served_app(tmp_path_factory, *options: str, cache: Path | None = None):
    """`panel serve app.py --address 127.0.0.1 --port P <options>` in a subprocess with a private
    cache (`cache`, or a new one) and served_env's settings: yields its http://localhost:P
    (Bokeh's default websocket origin); stopped afterwards, its log shown if it holds a
    traceback."""
    port = free_port()
    log = tmp_path_factory.mktemp("app") / "server.log"
    env = served_env(cache or tmp_path_factory.mktemp("cache"))
    cmd = [sys.executable, "-m", "panel", "serve", "app.py",
           "--address", "127.0.0.1", "--port", str(port),
           *[o.replace("{port}", str(port)) for o in options]]
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
                                preexec_fn=die_with_parent)
    url = f"http://localhost:{port}"
    try:
        wait_for_http(f"{url}/app", proc)
        yield url
    finally:
        stop_promptly(proc, f"panel serve app.py {' '.join(options)}".rstrip())
        text = log.read_text()
        if "Traceback" in text:
            sys.stderr.write(f"server log with a traceback:\n{text[-4000:]}\n")
