"""Plain `panel serve app.py` (the command a Panel user tries first, with only --address to keep
it on this machine) serves the site styled: every page renders, the stylesheet reaches the panes,
the logo loads, nothing answers an error. And Ctrl-C stops a served app, engine worker and all,
within seconds."""

from __future__ import annotations

import json
import signal
import subprocess
import time
import urllib.request

import pytest
from helpers import seed_machine_setup
from playwright.sync_api import expect
from ui_helpers import STOP_S, served_app, sigint_ignored

from bench.web.served_app import start_server, stop_server
from lessons.registry import LESSONS
from lessons.shell.router import PAGES
from lessons.shell.template import ROUTE, page_url

ACCENT = "rgb(31, 95, 139)"  # --accent in assets/app.css


@pytest.fixture(scope="session")
def plain_url(tmp_path_factory, machine_setup):
    """Session-scoped: pytest runs the browser test below with every other browser test and the
    other one later, and a module fixture would serve the app once for each."""
    cache = seed_machine_setup(machine_setup, tmp_path_factory.mktemp("cache"))
    with served_app(tmp_path_factory, cache=cache) as url:  # no option but the address
        yield url


def test_every_page_renders(plain_url):
    """Each page's HTML is rendered by the server's template on the first request (a template
    error, such as a favicon Panel cannot type, answers 500 on every page). No browser is opened,
    so no lesson starts measuring."""
    paths = [ROUTE, *(lesson.url for lesson in LESSONS), *(page_url(name) for name in PAGES)]
    for path in paths:
        with urllib.request.urlopen(f"{plain_url}/{path}", timeout=30) as response:
            html = response.read().decode()
        assert response.status == 200, path
        assert '<link rel="icon" href="data:image/svg+xml;base64,' in html, path


def test_plain_panel_serve_is_styled_without_errors(page, console, plain_url):
    failed = []
    page.on("response", lambda r: r.status >= 400 and failed.append(f"{r.status} {r.url}"))
    page.goto(f"{plain_url}/app")
    expect(page.get_by_text("How fast is a language model, really?").first).to_be_visible(
        timeout=60_000)
    current = page.locator('nav.course-nav a[aria-current="page"]')
    expect(current).to_have_css("background-color", ACCENT)  # the site's stylesheet applied
    expect(page.locator(".card h2").first).to_have_css("color", ACCENT)
    logo = page.locator("img.app-logo, #header img").first
    expect(logo).to_be_visible()
    assert logo.evaluate("img => img.naturalWidth") > 0
    assert failed == []
    assert console.errors == []


def test_ctrl_c_stops_the_app_and_its_engine_worker_within_seconds(tmp_path, machine_setup):
    """A teacher's Ctrl-C on the class command (bench/web/served_app.start_server, as the README
    runs it) once a page has started the engine worker: the server exits cleanly within STOP_S
    (about a second here), and its worker with it, nothing left holding the KV pool."""
    cache = seed_machine_setup(machine_setup, tmp_path / "cache")
    proc, url = start_server(str(cache), log=tmp_path / "server.log")
    try:
        worker = ready_worker(url)
        ignored = sigint_ignored(proc.pid)  # as this process had it, if ever so
        proc.send_signal(signal.SIGINT)
        started = time.monotonic()
        try:
            code = proc.wait(STOP_S)
        except subprocess.TimeoutExpired:
            code = None
        took = time.monotonic() - started
    finally:
        stop_server(proc)
    assert code == 0, (f"not stopped {took:.1f} s after Ctrl-C (exit code {code}; SIGINT "
                       f"ignored or blocked in it: {ignored})")
    assert gone(worker, STOP_S - took), f"engine worker {worker} outlived the server"


def ready_worker(url: str, timeout_s: float = 120) -> int:
    """The engine worker's pid once it has said hello (the first page starts it)."""
    urllib.request.urlopen(f"{url}/app", timeout=30).close()
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with urllib.request.urlopen(f"{url}/engine-status", timeout=30) as response:
            status = json.loads(response.read())
        if status["ready"]:
            return status["worker_pid"]
        time.sleep(0.2)  # polling a worker that is starting up
    raise AssertionError(f"no engine worker ready within {timeout_s} s: {status}")


def gone(pid: int, within_s: float) -> bool:
    """Whether a process has exited (or is a zombie waiting to be reaped) within a time."""
    deadline = time.monotonic() + max(within_s, 0.5)
    while True:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    return True
        except OSError:
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)  # polling a process that is exiting
