"""A Tornado websocket write that fails because the reader left, and that nobody awaits (as Panel
drops its writes when a session's document is destroyed): asyncio logs it with a traceback
unless widgets.runtime.closed_sockets' filter is installed; other never-retrieved exceptions are
still logged."""

from __future__ import annotations

import asyncio
import gc
import logging

import pytest
from helpers import run_coroutine
from tornado.httpserver import HTTPServer
from tornado.testing import bind_unused_port
from tornado.web import Application
from tornado.websocket import WebSocketHandler, websocket_connect

from widgets.runtime.closed_sockets import ClosedSocketWrites, ignore_closed_socket_writes

BIG = 64 << 20  # more than the socket's buffers take at once: the write is still pending


async def _write_then_close() -> None:
    """A server-side write to a connected reader, left running (not awaited) while the
    connection closes under it: the task ends in WebSocketClosedError, and is then let go."""
    opened: asyncio.Future = asyncio.get_running_loop().create_future()

    class Handler(WebSocketHandler):
        def open(self):
            opened.set_result(self)

    sock, port = bind_unused_port()
    server = HTTPServer(Application([("/ws", Handler)]))
    server.add_sockets([sock])
    client = await websocket_connect(f"ws://127.0.0.1:{port}/ws")
    handler = await asyncio.wait_for(opened, 5)
    write = handler.write_message(b"x" * BIG, binary=True)  # a Task, as Panel keeps it
    handler.ws_connection.stream.close()  # the reader has gone
    await asyncio.sleep(0.1)
    assert write.done()  # failed; its exception not read here (that would retrieve it)
    del write
    client.close()
    server.stop()


def _never_retrieved(caplog) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "asyncio"
            and r.getMessage().startswith("Task exception was never retrieved")]


def _drop_write(caplog) -> list[logging.LogRecord]:
    with caplog.at_level(logging.ERROR, logger="asyncio"):
        run_coroutine(_write_then_close())
        gc.collect()
    return _never_retrieved(caplog)


@pytest.fixture
def asyncio_logger():
    logger = logging.getLogger("asyncio")
    before = list(logger.filters)
    yield logger
    logger.filters[:] = before


def test_without_the_filter_a_dropped_write_to_a_closed_reader_logs_a_traceback(
        asyncio_logger, caplog):
    asyncio_logger.filters[:] = [f for f in asyncio_logger.filters
                                 if not isinstance(f, ClosedSocketWrites)]
    records = _drop_write(caplog)
    assert len(records) == 1
    assert "WebSocketClosedError" in repr(records[0].exc_info[1])
    assert "WebSocketProtocol13.write_message" in records[0].getMessage()


def test_with_the_filter_it_is_not_logged_and_other_lost_exceptions_still_are(
        asyncio_logger, caplog):
    ignore_closed_socket_writes()
    ignore_closed_socket_writes()  # once a session: installed once
    assert sum(isinstance(f, ClosedSocketWrites) for f in asyncio_logger.filters) == 1
    assert _drop_write(caplog) == []

    async def fails():
        raise ValueError("a bug of ours")

    async def let_go():
        asyncio.ensure_future(fails())  # nobody keeps it or reads its exception
        await asyncio.sleep(0.01)

    with caplog.at_level(logging.ERROR, logger="asyncio"):
        run_coroutine(let_go())
        gc.collect()
    records = _never_retrieved(caplog)
    assert len(records) == 1 and isinstance(records[0].exc_info[1], ValueError)

