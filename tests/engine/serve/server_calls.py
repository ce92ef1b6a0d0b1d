"""Calls the HTTP tests make to the served engine (tests/conftest.py's `server`), as a plain
module: its scheduler's counters and its trace."""

from __future__ import annotations

import httpx


def stats(server) -> dict:
    return httpx.get(server["url"] + "/engine/stats", timeout=10).json()


def engine_trace(server, since_s: float = 0.0) -> dict:
    return httpx.get(server["url"] + "/engine/trace", params={"since_s": since_s},
                     timeout=30).json()
