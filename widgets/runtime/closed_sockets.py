"""A reader's page updates that Panel started writing and then dropped when the reader left: kept
out of the server's log as tracebacks. Filters asyncio's logger.

Why: Panel writes a page's updates as Tornado `write_message` tasks (panel.io.document
dispatch_tornado) and awaits them in a task of its own (_run_write_futures), which turns a closed
connection into one warning line ("Failed sending message as connection was closed"). When the
reader's session is destroyed first (panel.io.document._destroy_document), Panel cancels that
task and the writes it lists: a write that has already failed cannot be cancelled, and the ones
behind the cancelled await are never awaited. asyncio logs each such task's exception when the
task is collected: "Task exception was never retrieved ... WebSocketClosedError" with a chained
traceback, at a reader's close or as a class leaves (bench/lab/classroom.py counts it as an
exception of the server's). Nothing is lost: the reader is gone and their page is being
discarded. It is Panel's bookkeeping (reported upstream as holoviz/panel #3341), not reachable
from our code without patching Panel's private functions.

`ignore_closed_socket_writes()` drops exactly those records: asyncio's "Task exception was never
retrieved" for a task of Tornado's WebSocketProtocol13.write_message whose exception is a
WebSocketClosedError. Every other never-retrieved exception, and every other asyncio message, is
logged as before.
"""
from __future__ import annotations

import logging

from tornado.websocket import WebSocketClosedError

NEVER_RETRIEVED = "Task exception was never retrieved"
WRITE_TASK = "WebSocketProtocol13.write_message."  # the task's coroutine, in asyncio's message


class ClosedSocketWrites(logging.Filter):
    """False (drop) for asyncio's report of a dropped Tornado write to a closed websocket."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if not isinstance(exc, WebSocketClosedError):
            return True
        message = record.getMessage()
        return not (message.startswith(NEVER_RETRIEVED) and WRITE_TASK in message)


def ignore_closed_socket_writes() -> None:
    """Install the filter on asyncio's logger, once per process (idempotent: app.py, which
    installs it, runs once a session)."""
    if not installed():
        logging.getLogger("asyncio").addFilter(ClosedSocketWrites())


def installed() -> bool:
    """True while asyncio's logger has the filter."""
    return any(isinstance(f, ClosedSocketWrites) for f in logging.getLogger("asyncio").filters)
