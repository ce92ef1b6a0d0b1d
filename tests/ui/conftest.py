"""Browser tests: the app served by `panel serve` (the README's command) in a subprocess on free
ports, a second local web server on another origin for the embedding tests, and Debian's
Chromium driven by pytest-playwright (no downloaded browser). Ports, waiting for a server, its
stop and Chromium's options are bench/web/served_app.py's, so the benches serve the app the same way."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
from contextlib import ExitStack, contextmanager
from pathlib import Path
from unittest import mock

import pytest
from helpers import seed_machine_setup
from playwright.sync_api import expect
from ui_helpers import TEACHER_KEY, ConsoleLog, engine_cores_setting, served_app, stop_promptly

from bench.web.served_app import CHROMIUM, CHROMIUM_ARGS, free_port, wait_for_http

# Playwright's expect() waits 5 s unless told: a page drawn on a busy machine (the browser tests
# run two at a time, each with its own app) can take longer to show its first words. A bound for
# a stuck page, not a timing: a test that asserts a wait says its own timeout.
expect.set_options(timeout=30_000)


def pytest_collection_modifyitems(items):
    for item in items:
        if "tests/ui/" in str(item.fspath).replace(os.sep, "/"):
            item.add_marker(pytest.mark.browser)


@pytest.fixture(scope="session")
def embed_port() -> int:
    return free_port()


@contextmanager
def once_per_run(tmp_path_factory, name: str):
    """For what this run's pytest-xdist workers share (the browser tests run two at a time, each
    worker with its own served app): held by one worker at a time, it yields the path `name`
    in the folder the workers share (the run's, above each one's own temp folder) and whether it
    is still to be made there; the first worker to come makes it, the others wait for it and use
    it. Under xdist only: without it that folder is every pytest run's."""
    shared = tmp_path_factory.getbasetemp().parent
    with open(shared / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        done = shared / f"{name}.done"
        yield shared / name, not done.exists()
        done.touch()


@pytest.fixture(scope="session")
def machine_setup_run(request, tmp_path_factory, worker_id):
    """tests/conftest.py's `python -m engine tune` (the served apps' caches copy it), run once for
    all of this run's pytest-xdist workers: two tunes at once would time the same plans on the
    same cores, and keep no limits (measured under load)."""
    if worker_id == "master":
        return request.getfixturevalue("machine_setup_run")  # tests/conftest.py's, as it is
    with once_per_run(tmp_path_factory, "machine-setup.json") as (record, first):
        if first:
            cache, out = request.getfixturevalue("machine_setup_run")  # tests/conftest.py's
            record.write_text(json.dumps({"cache": str(cache), "args": out.args,
                                          "returncode": out.returncode, "stdout": out.stdout,
                                          "stderr": out.stderr}))
    ran = json.loads(record.read_text())
    return Path(ran.pop("cache")), subprocess.CompletedProcess(**ran)


@pytest.fixture(scope="session")
def app_cache(tmp_path_factory, machine_setup, worker_id) -> Path:
    """The served app's own results cache (its engine worker's $LLM_SPEED_CACHE), holding a
    set-up machine's plans and limits (tests/conftest.py: machine_setup) and no results. One for
    all of this run's pytest-xdist workers' apps, as in a run one at a time: a result one app
    measured is the other's too (nothing measured twice), and the static export reads the
    results of the lessons' tests that either worker ran (its results are one file each, written
    atomically: engine.lab.cache)."""
    if worker_id == "master":
        return seed_machine_setup(machine_setup, tmp_path_factory.mktemp("cache"))
    with once_per_run(tmp_path_factory, "app-cache") as (cache, first):
        if first:
            seed_machine_setup(machine_setup, cache)
    return cache


@pytest.fixture(scope="session")
def app_url(tmp_path_factory, embed_port, app_cache):
    """`panel serve app.py` as the README runs it for a class, allowing the embedding origin."""
    with ExitStack() as stack:
        with mock.patch.dict(os.environ, {"LLM_SPEED_TEACHER_KEY": TEACHER_KEY}):  # its key
            url = stack.enter_context(served_app(
                tmp_path_factory, "--plugins", "lessons.shell.routes",
                # a closed page's session ends within a second or two, not Bokeh's 15-30 s
                "--unused-session-lifetime", "1000", "--check-unused-sessions", "500",
                "--allow-websocket-origin", "localhost:{port}",
                "--allow-websocket-origin", f"127.0.0.1:{embed_port}",
                cache=app_cache))
        yield url


@pytest.fixture(scope="session")
def app_int8_kernel(tmp_path_factory, int8_kernel, app_cache, worker_id) -> None:
    """The int8 kernel the tests built, copied into the served app's own cache (the quantization
    lesson's jobs): an engine worker reads its cache and never compiles, so without it int8 jobs
    are refused. One name serves a worker pinned to any number of cores
    (engine.model.cpu_kernel.library_path)."""
    from engine.model.cpu_kernel import INT8_LINEAR, library_path

    built = library_path(INT8_LINEAR)
    with mock.patch.dict(os.environ, {"LLM_SPEED_CACHE": str(app_cache)}):
        target = library_path(INT8_LINEAR)
    if worker_id == "master":
        copy_file(built, target)
        return
    with once_per_run(tmp_path_factory, "app-int8-kernel") as (_, first):
        if first:  # the workers' apps share one cache (app_cache)
            copy_file(built, target)


def copy_file(source: Path, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(source, target)


# The embedded lesson's settings, the same in both embeddings: a small workload, measured once.
EMBEDDED_KNOB = "batch_size=4&prompt_len=16&new_tokens=8"


@pytest.fixture(scope="session")
def embed_site(tmp_path_factory, app_url, embed_port):
    """Another origin (127.0.0.1:<port>, not localhost:<app port>) with pages embedding a
    lesson: one by iframe, one by Bokeh's server_document script tag."""
    from bokeh.embed import server_document

    site = tmp_path_factory.mktemp("course-site")
    (site / "iframe.html").write_text(
        '<!doctype html><html><head><title>Course site</title></head><body>'
        '<h1>Our course</h1><iframe id="lesson" title="Lesson" width="1000" height="700" '
        f'src="{app_url}/app?lesson=knob&{EMBEDDED_KNOB}"></iframe></body></html>')
    script = server_document(f"{app_url}/app", arguments={
        "lesson": "knob", **dict(arg.split("=") for arg in EMBEDDED_KNOB.split("&"))})
    (site / "script.html").write_text(
        '<!doctype html><html><head><title>Course site</title></head><body>'
        f'<h1>Our course</h1><div id="lesson">{script}</div></body></html>')
    (site / "favicon.ico").write_bytes(b"")
    proc = subprocess.Popen(
        [sys.executable, "-m", "http.server", str(embed_port), "--bind", "127.0.0.1",
         "--directory", str(site)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{embed_port}"
    try:
        wait_for_http(f"{url}/iframe.html", proc)
        yield url
    finally:
        stop_promptly(proc, "the course site's http.server")


@pytest.fixture(scope="session")
def playwright():
    """pytest-playwright's own fixture (less its --tracing hook, unused here), with Playwright's
    driver started on the cores the served app's web process gets (engine.lab.cores.plan: core 0
    of 2, or this worker's split: ui_helpers.engine_cores_setting), so Chromium, the driver's
    child, and every page it renders run there too, as a reader's browser runs on the reader's
    machine. Anywhere else its rendering takes the engine
    worker's core while a lesson measures: the job comes back DISTURBED and is measured again,
    seconds later. Only the driver is placed: this process gets its cores back at once."""
    from playwright.sync_api import sync_playwright

    from engine.lab.cores import ENV, available_cores, plan

    split = plan(available_cores(), engine_cores_setting() or os.environ.get(ENV))
    mine = os.sched_getaffinity(0)
    if split.isolated:
        os.sched_setaffinity(0, split.web)
    try:
        pw = sync_playwright().start()
    finally:
        os.sched_setaffinity(0, mine)
    yield pw
    pw.stop()


@pytest.fixture(scope="session")
def browser_type_launch_args(browser_type_launch_args):
    return {**browser_type_launch_args, "executable_path": CHROMIUM, "args": CHROMIUM_ARGS,
            "headless": True}


@pytest.fixture(scope="session")
def browser_context_args(browser_context_args):
    return {**browser_context_args, "viewport": {"width": 1280, "height": 900}}


@pytest.fixture
def console(page) -> ConsoleLog:
    return ConsoleLog(page)
