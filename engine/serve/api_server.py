"""An OpenAI-compatible HTTP server over the online engine (FastAPI on uvicorn).

Routes: GET /v1/models, POST /v1/completions, POST /v1/chat/completions (stream: true answers
with server-sent events, one per token, ending with `data: [DONE]`), GET /health, GET /metrics
(Prometheus' text format under vLLM's metric names, prometheus.py), and two of
our own for teaching and tests: GET /v1/engine/stats (running and waiting sequences, KV blocks
in use, the most recent steps with how many sequences each decoded) and GET /v1/engine/trace
(the engine's own trace since a time, in the `run` command's shape; bench-client compares it
with what the client measured).

With traffic classes (`serve --classes`, engine/traffic.py) each request goes into a class: the
`X-Traffic-Class` header, else the body's `traffic_class`, else its `service_tier` (OpenAI's
field; "auto" and "default" mean the first class), else the first class; its tenant, for the
per-tenant token buckets, is the body's `user`. The engine classifies it before anything is
sent back: a request over a class's cap (new tokens, prompt length, an unknown class) gets 400,
one turned away by a full queue or its tenant's quota gets 429 (with Retry-After when the
bucket refills at a known time), each with an OpenAI-style error body naming the limit.

The handlers run on uvicorn's event loop; the engine runs in its own thread (online.py). A
handler checks and tokenizes a request, hands it to the engine, and reads the engine's outputs
from an asyncio queue that the engine thread fills with call_soon_threadsafe. A client that
disconnects, streaming or not, has its request aborted, which frees its slot and KV blocks
before the engine's next step. Every error is an OpenAI-style error object, never a traceback.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import signal
import socket
import threading
from collections.abc import AsyncIterator
from pathlib import Path

import uvicorn
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.exceptions import HTTPException

from ..traffic import Refusal, RefusalKind
from .online import OnlineEngine, Output, Submission
from .perfetto import write_trace
from .prometheus import CONTENT_TYPE
from .protocol import (
    SSE_DONE,
    APIError,
    ChatCompletionRequest,
    CompletionRequest,
    Reply,
    Settings,
    chat_text,
    completion_prompt,
    error_object,
    parse,
    settings,
    sse,
)

STATUS_TYPES = {400: "BadRequestError", 404: "NotFoundError", 405: "MethodNotAllowed",
                429: "RateLimitError", 500: "InternalServerError", 503: "ServiceUnavailableError"}
# A refusal's HTTP status by its kind: a cap is the request's fault, the rest the load's.
REFUSAL_STATUS = {RefusalKind.CAP: 400, RefusalKind.QUEUE_FULL: 429, RefusalKind.QUOTA: 429}
DEFAULT_TIERS = ("auto", "default")  # service_tier values meaning "the first class"


def refusal_error(refusal: Refusal) -> APIError:
    """The HTTP answer to a request its traffic class turned away."""
    status = REFUSAL_STATUS[refusal.kind]
    headers = None
    if refusal.retry_after_s is not None:
        headers = {"Retry-After": str(max(1, math.ceil(refusal.retry_after_s)))}
    return APIError(str(refusal), status=status, kind=STATUS_TYPES[status],
                    param="traffic_class" if refusal.kind is RefusalKind.CAP else None,
                    headers=headers)


def lane_of(request: Request, body) -> tuple[str | None, str | None]:
    """(traffic class, tenant) of a request (the module docstring says where they come from)."""
    name = request.headers.get("x-traffic-class") or body.traffic_class
    if not name and body.service_tier not in (None, *DEFAULT_TIERS):
        name = body.service_tier
    return name or None, body.user or None


def build_app(online: OnlineEngine, model_name: str) -> FastAPI:
    """The FastAPI application serving online's engine under the name model_name."""
    app = FastAPI(title="llm-serving-speed engine", version="0.1.0")
    engine = online.engine
    context = engine.model_config.context
    vocab = min(engine.tokenizer.vocab_size, engine.model_config.vocab)

    @app.exception_handler(APIError)
    async def api_error(request: Request, e: APIError) -> JSONResponse:
        return JSONResponse(e.to_json(), status_code=e.status, headers=e.headers)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, e: RequestValidationError) -> JSONResponse:
        first = e.errors()[0] if e.errors() else {"loc": (), "msg": "invalid request"}
        where = ".".join(str(p) for p in first["loc"])
        return JSONResponse(error_object(f"{where}: {first['msg']}", "BadRequestError", 400),
                            status_code=400)

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, e: HTTPException) -> JSONResponse:
        kind = STATUS_TYPES.get(e.status_code, "Error")
        return JSONResponse(error_object(str(e.detail), kind, e.status_code),
                            status_code=e.status_code)

    @app.exception_handler(Exception)
    async def crashed(request: Request, e: Exception) -> JSONResponse:
        return JSONResponse(error_object(f"internal error: {type(e).__name__}: {e}",
                                         "InternalServerError", 500), status_code=500)

    def check_model(name: str) -> None:
        if name != model_name:
            raise APIError(f"The model `{name}` does not exist.", status=404,
                           kind="NotFoundError", param="model")

    @app.get("/health")
    async def health() -> JSONResponse:
        if online.error is not None:
            return JSONResponse(error_object(f"the engine stopped: {online.error}",
                                             "InternalServerError", 500), status_code=500)
        return JSONResponse({"status": "ok"})

    @app.get("/v1/models")
    async def models() -> dict:
        card = {"id": model_name, "object": "model", "created": 0,
                "owned_by": "llm-serving-speed", "root": model_name,
                "max_model_len": context, "weights": online.weights}
        return {"object": "list", "data": [card]}

    @app.post("/v1/completions")
    async def completions(request: Request):
        received = online.clock()
        req = parse(CompletionRequest, await request.body())
        check_model(req.model)
        began = online.clock()
        ids = completion_prompt(req.prompt, engine.tokenizer.encode, vocab)
        times = (received, began, online.clock())
        return await respond(request, settings(req, ids, context), chat=False, times=times,
                             lane=lane_of(request, req))

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request):
        received = online.clock()
        req = parse(ChatCompletionRequest, await request.body())
        check_model(req.model)
        began = online.clock()
        ids = completion_prompt(chat_text(req.messages), engine.tokenizer.encode, vocab)
        times = (received, began, online.clock())
        return await respond(request, settings(req, ids, context), chat=True, times=times,
                             lane=lane_of(request, req))

    @app.get("/metrics")
    async def metrics() -> Response:
        return Response(online.prometheus(), media_type=CONTENT_TYPE)

    @app.get("/v1/engine/stats")
    async def stats() -> dict:
        return online.stats()

    @app.get("/v1/engine/trace")
    async def trace(since_s: float = 0.0) -> dict:
        return online.trace(since_s)

    async def respond(request: Request, s: Settings, chat: bool,
                      times: tuple[float, float, float], lane: tuple[str | None, str | None]):
        try:
            online.check(s.prompt_ids, s.max_tokens)  # the KV pool's limit
        except ValueError as e:
            raise APIError(str(e)) from None
        reply = Reply(chat=chat, model=model_name, include_usage=s.include_usage,
                      prompt_ids=s.prompt_ids if s.return_token_ids else None)
        submitted = None
        if online.config.traffic is not None:  # classified before anything is sent back
            submitted = await classified(request, s, reply, times, lane)
            if submitted is None:
                return JSONResponse(error_object("client closed the request", "ClientClosed",
                                                 499), status_code=499)
        if s.stream:
            return StreamingResponse(stream(s, reply, times, submitted),
                                     media_type="text/event-stream")
        return await whole(request, s, reply, times, submitted)

    async def classified(request: Request, s: Settings, reply: Reply,
                         times: tuple[float, float, float], lane: tuple[str | None, str | None]
                         ) -> tuple[int, asyncio.Queue] | None:
        """Hand the request in and wait until the engine has put it in its class: raise its
        refusal as an APIError; None if the client went away meanwhile (then abort)."""
        loop = asyncio.get_running_loop()
        verdict: asyncio.Future = loop.create_future()

        def accepted(refusal: Refusal | None) -> None:  # on the engine thread
            loop.call_soon_threadsafe(lambda: verdict.done() or verdict.set_result(refusal))

        request_id, outputs = submit(s, reply, times, lane, accepted)
        watching = asyncio.ensure_future(disconnected(request))
        try:
            await asyncio.wait({verdict, watching}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            watching.cancel()
        if not verdict.done():
            online.abort(request_id)
            return None
        refusal = verdict.result()
        if refusal is not None:
            raise refusal_error(refusal)
        return request_id, outputs

    def submit(s: Settings, reply: Reply, times: tuple[float, float, float],
               lane: tuple[str | None, str | None] = (None, None),
               accepted=None) -> tuple[int, asyncio.Queue]:
        """Hand the request in; times: when it reached the server, and its tokenizer run's
        start and end (its trace's HTTP side, engine.serve.phases); lane: its traffic class
        and tenant; accepted: called once it is classified (Submission.accepted)."""
        outputs: asyncio.Queue[Output] = asyncio.Queue()
        loop = asyncio.get_running_loop()

        def deliver(out: Output) -> None:  # on the engine thread
            loop.call_soon_threadsafe(outputs.put_nowait, out)

        try:
            request_id = online.submit(Submission(s.prompt_ids, s.max_tokens, s.sampling,
                                                  deliver, s.stop, s.ignore_eos, reply.id,
                                                  *times, traffic_class=lane[0],
                                                  tenant=lane[1], accepted=accepted))
        except RuntimeError as e:
            raise APIError(str(e), status=503, kind="ServiceUnavailableError") from None
        return request_id, outputs

    async def stream(s: Settings, reply: Reply, times: tuple[float, float, float],
                     submitted: tuple[int, asyncio.Queue] | None = None) -> AsyncIterator[str]:
        """One event per token; the request is submitted only once the stream starts (unless
        it was, to be classified first), and aborted if the stream ends early (the client
        went away: Starlette cancels it here)."""
        request_id, outputs = submitted or submit(s, reply, times)
        done = False
        try:
            while True:
                out = await outputs.get()
                if out.finish_reason in ("abort", "error"):
                    done = True
                    message = out.error or "the server stopped before the request finished"
                    yield sse(error_object(message, "InternalServerError", 500))
                    break
                yield reply.chunk(out.text, out.finish_reason, out.token_ids)
                if out.finished:
                    done = True
                    if reply.include_usage:
                        yield reply.usage_chunk(out.prompt_tokens, out.completion_tokens)
                    break
            yield SSE_DONE
            online.responded(request_id)  # resumed once the server took the last event
        finally:
            if not done:
                online.abort(request_id)

    async def whole(request: Request, s: Settings, reply: Reply,
                    times: tuple[float, float, float],
                    submitted: tuple[int, asyncio.Queue] | None = None) -> JSONResponse:
        """Collect the whole answer, unless the client disconnects first (then abort)."""
        request_id, outputs = submitted or submit(s, reply, times)

        async def collect() -> tuple[str, list[int], Output]:
            pieces, ids = [], []
            while True:
                out = await outputs.get()
                pieces.append(out.text)
                ids += out.token_ids
                if out.finished:
                    return "".join(pieces), ids, out

        collecting = asyncio.ensure_future(collect())
        watching = asyncio.ensure_future(disconnected(request))
        try:
            await asyncio.wait({collecting, watching}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            watching.cancel()
            if not collecting.done():
                collecting.cancel()
                online.abort(request_id)
        if not collecting.done() or collecting.cancelled():
            return JSONResponse(error_object("client closed the request", "ClientClosed", 499),
                                status_code=499)
        text, ids, last = collecting.result()
        if last.finish_reason in ("abort", "error"):
            message = last.error or "the server stopped before the request finished"
            raise APIError(message, status=500, kind="InternalServerError")
        response = JSONResponse(reply.whole(text, last.finish_reason, ids, last.prompt_tokens,
                                            last.completion_tokens))
        online.responded(request_id)  # the body is built: what is left is the socket's
        return response

    return app


async def disconnected(request: Request) -> None:
    """Return when the client disconnects (the body has been read, so the next message the
    server receives for this request is the disconnect)."""
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return


def listen(host: str, port: int) -> socket.socket:
    """A listening socket on host:port (port 0: any free port), opened before the model loads so
    a taken port is reported at once. OSError names the problem."""
    family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
        sock.listen(2048)
    except OSError:
        sock.close()
        raise
    return sock


def run_server(online: OnlineEngine, model_name: str, sock: socket.socket,
               trace_out: Path | None = None) -> None:
    """Serve until interrupted (SIGINT or SIGTERM); the engine thread stops after the server,
    then the engine's timeline goes to trace_out (Chrome trace-event JSON), when given."""
    config = uvicorn.Config(build_app(online, model_name), log_level="warning",
                            access_log=False, lifespan="off", timeout_graceful_shutdown=3)
    # uvicorn shuts down gracefully on SIGTERM, then raises the signal again under the handler
    # it found: Python's default would end the process before the cleanup below.
    main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _stop) if main else None
    try:
        uvicorn.Server(config).run(sockets=[sock])
    finally:
        online.close()
        with contextlib.suppress(OSError):
            sock.close()
        if main:
            signal.signal(signal.SIGTERM, previous)
        if trace_out is not None:
            write_trace(trace_out, online.trace(0.0))


def _stop(signum, frame) -> None:
    raise SystemExit(0)
