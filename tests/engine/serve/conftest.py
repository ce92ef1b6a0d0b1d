"""Helpers for the HTTP tests; the served engine itself is tests/conftest.py's `server`."""

from __future__ import annotations

import httpx
from helpers import SERVER_MAX_BATCH as MAX_BATCH  # noqa: F401 (the tests' import)


def stats(server) -> dict:
    return httpx.get(server["url"] + "/engine/stats", timeout=10).json()


def engine_trace(server, since_s: float = 0.0) -> dict:
    return httpx.get(server["url"] + "/engine/trace", params={"since_s": since_s},
                     timeout=30).json()
