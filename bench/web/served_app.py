"""The app served for a benchmark, as the README runs it: `panel serve app.py` on a free port of
127.0.0.1 with a measurement cache of its own, stopped with Ctrl-C (so it shuts its engine worker
down); plus what the benchmarks read about it (the memory of the web process and its worker).
Shared by bench/web/ui_latency.py, bench/lab/classroom.py and bench/web/ui_truth.py; the browser tests import
its serving and Chromium parts too (tests/ui/conftest.py, as `bench.web.served_app`), so a bench and
a test start, wait for, stop and read the app the same way. Standard library only."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update",
                 "--disable-sync"]
START_TIMEOUT_S = 120
# Every lesson measures nothing fresh until its reader predicts or skips (widgets/prediction.py):
# a bench that times measurements skips, so the figures leave out a reader's thinking time.
SKIP_PREDICTION = "Skip the prediction and measure"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# The text under an element (the page's body by default), shadow DOMs included: Panel renders
# each component in its own, so an element's innerText misses what its shadow root holds.
PAGE_TEXT_JS = """(root) => {
  const parts = [];
  const walk = (node) => {
    if (node.shadowRoot) walk(node.shadowRoot);
    for (const child of node.childNodes) {
      if (child.nodeType === Node.TEXT_NODE) parts.push(child.textContent);
      else if (child.nodeType === Node.ELEMENT_NODE && child.tagName !== 'SCRIPT'
               && child.tagName !== 'STYLE') walk(child);
    }
  };
  walk(root || document.body);
  return parts.join(' ');
}"""


def wait_for_http(url: str, proc: subprocess.Popen, timeout: float = START_TIMEOUT_S) -> None:
    """Until `url` answers 200; an error if the process exits or the time runs out first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{' '.join(map(str, proc.args[:4]))} exited with "
                               f"{proc.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(0.2)  # polling a server that is starting up
    raise TimeoutError(f"{url} did not answer within {timeout} s")


def start_server(cache: str, extra: tuple[str, ...] = (), log: Path | None = None,
                 env_extra: dict[str, str] | None = None) -> tuple[subprocess.Popen, str]:
    """`panel serve app.py` with the README's options on 127.0.0.1, a page the reader left
    ending its session (and its jobs) within a second; (process, base URL) once /app answers.
    `env_extra` goes to the server's environment on top of the class command's (an allocator
    to compare: PYTHONMALLOC=pymalloc)."""
    port = free_port()
    env = {**os.environ, "LLM_SPEED_CACHE": cache, "PYTHONMALLOC": "malloc",  # the class command's
           **(env_extra or {})}
    out = open(log, "w") if log else subprocess.DEVNULL  # noqa: SIM115 (the server keeps it)
    proc = subprocess.Popen(
        [sys.executable, "-m", "panel", "serve", "app.py", "--port", str(port),
         "--address", "127.0.0.1",
         "--plugins", "lessons.shell.routes",
         "--allow-websocket-origin", f"localhost:{port}",
         "--allow-websocket-origin", f"127.0.0.1:{port}",
         "--unused-session-lifetime", "1000", "--check-unused-sessions", "500", *extra],
        cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for_http(f"{url}/app", proc)
    except TimeoutError:
        proc.kill()
        raise
    return proc, url


def stop_server(proc: subprocess.Popen) -> float:
    """Ctrl-C first (the app shuts its engine worker down), then harder; the seconds it took.
    An app stops within a second or two of Ctrl-C (tests/ui/test_plain_serve.py), so a caller
    that sees this wait run to the kill has found a defect, not a slow machine."""
    started = time.monotonic()
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(15)
    return time.monotonic() - started


def rss_mib(pid: int | None) -> float | None:
    """A process's resident memory (VmRSS) in MiB; None if it is gone."""
    if pid is None:
        return None
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def child_pids(pid: int) -> list[int]:
    """The direct children of a process (the server's engine worker among them)."""
    kids = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            kids += [int(p) for p in (task / "children").read_text().split()]
        except OSError:
            pass
    return kids
