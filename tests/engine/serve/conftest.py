"""A real `python -m engine serve` on 127.0.0.1 (a free port), shared by this package's HTTP
tests: started once, stopped after them, and bounded in time whatever happens to the tests."""

from __future__ import annotations

import json
import subprocess
import sys
import threading

import httpx
import pytest

LIFETIME_S = 900  # the server is killed after this however the test session ends
MAX_BATCH = 8


@pytest.fixture(scope="package")
def server(tmp_path_factory):
    """The served tiny model: yields the JSON line `serve --json` prints (url, model, ...)."""
    log = tmp_path_factory.mktemp("server") / "stderr.txt"
    with open(log, "w") as err:
        proc = subprocess.Popen(
            ["timeout", str(LIFETIME_S), sys.executable, "-m", "engine", "serve", "--port", "0",
             "--json", "--kv-budget-mib", "16", "--max-batch", str(MAX_BATCH)],
            stdout=subprocess.PIPE, stderr=err, text=True)
    line: list[str] = []
    reader = threading.Thread(target=lambda: line.append(proc.stdout.readline()), daemon=True)
    reader.start()
    reader.join(120)
    try:
        if not line or not line[0]:
            raise RuntimeError(f"the server did not start: {log.read_text()[-2000:]}")
        info = json.loads(line[0])
        yield info
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def stats(server) -> dict:
    return httpx.get(server["url"] + "/engine/stats", timeout=10).json()


def engine_trace(server, since_s: float = 0.0) -> dict:
    return httpx.get(server["url"] + "/engine/trace", params={"since_s": since_s},
                     timeout=30).json()
