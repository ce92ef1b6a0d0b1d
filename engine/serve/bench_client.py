"""A client-side load generator for any OpenAI-compatible server (ours, vLLM, SGLang, ...):
it sends a seeded workload's requests over HTTP at their arrival times and measures, at the
client, what `run` measures inside the engine.

Each request is a streamed POST /v1/completions (max_tokens = its output length, ignore_eos so
the length is forced, as `run` forces it, temperature 0). Its trace is kept on the client's
clock (time.perf_counter() minus the benchmark's start): arrival = when the request was sent,
one token time per streamed chunk that carries a choice, output length = the completion tokens
of the server's usage report. The metrics are then serve/metrics.py's, the definitions of
vLLM's benchmark_serving (TTFT from sending to the first chunk; TPOT = (E2E - TTFT) / (N - 1);
ITL = every gap between chunks; E2E from sending to the last chunk; goodput = requests meeting
every SLO per second). Failed requests (an HTTP error, an error event, a dropped connection) are
counted and left out of the metrics, as vLLM leaves them out.

The workload is serve/workload.py's, so `bench-client` and `run` with the same flags and seed
send the same prompts (our tokenizer's tokens, sent as text), lengths and arrival times; the
closed-loop kind ("fixed") keeps `concurrency` requests outstanding, as N users would.

This module sends and times the requests; what they measured, the run's summary and its
comparison with our own server's trace of the same requests, is engine/serve/bench_result.py's.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import deque
from collections.abc import Callable

import httpx

from ..errors import ConfigError
from ..lab.endpoint import api_base
from .bench_result import BenchResult, Endpoint, Load, Sent
from .trace import RequestTrace
from .workload import Request

CONNECT_TIMEOUT_S = 10.0
DEFAULT_TIMEOUT_S = 600.0  # a whole benchmark's limit, when the caller names none


class EndpointError(Exception):
    """The server cannot be used (unreachable, no such model, not OpenAI-compatible)."""


# ---- the run ---------------------------------------------------------------------------------------
def _error_message(body: bytes, status: int) -> str:
    try:
        err = json.loads(body)["error"]
        return f"HTTP {status}: {err['message'] if isinstance(err, dict) else err}"
    except (ValueError, KeyError, TypeError):
        return f"HTTP {status}: {body[:200].decode(errors='replace')}"


async def probe(client: httpx.AsyncClient, base: str, model: str) -> Endpoint:
    """Check the server serves model (GET /v1/models), before anything is measured."""
    try:
        resp = await client.get(f"{base}/models")
    except httpx.HTTPError as e:
        raise EndpointError(f"cannot reach {base}: {e or type(e).__name__}") from None
    if resp.status_code != 200:
        raise EndpointError(f"{base}/models answered {_error_message(resp.content, resp.status_code)}")
    try:
        cards = {m["id"]: m for m in resp.json()["data"]}
    except (ValueError, KeyError, TypeError):
        raise EndpointError(f"{base}/models is not an OpenAI model list") from None
    if model not in cards:
        raise ConfigError(f"model {model!r} is not served at {base}: it serves "
                          f"{', '.join(cards) or 'nothing'}")
    card = cards[model]
    context = card.get("max_model_len")
    return Endpoint(base, model, context if isinstance(context, int) else None,
                    card.get("weights"))


async def send(client: httpx.AsyncClient, endpoint: Endpoint, sent: Sent, max_tokens: int,
               clock, on_token: Callable[[float, str], None] | None = None) -> None:
    """One streamed completion, timed at the client (see the module docstring); on_token(t_s,
    text) as each token's chunk arrives, for a page that shows the answer as it streams."""
    trace = sent.trace
    payload = {"model": endpoint.model, "prompt": sent.prompt, "max_tokens": max_tokens,
               "temperature": 0, "ignore_eos": True, "stream": True,
               "stream_options": {"include_usage": True}}
    completion_tokens = None
    trace.arrival_s = clock()
    try:
        async with client.stream("POST", f"{endpoint.base}/completions", json=payload) as resp:
            if resp.status_code != 200:
                sent.error = _error_message(await resp.aread(), resp.status_code)
                return
            async for line in resp.aiter_lines():
                if not line.startswith("data:"):
                    continue
                t = clock()
                data = line[5:].strip()
                if data == "[DONE]":
                    break
                chunk = json.loads(data)
                if "error" in chunk:
                    sent.error = str(chunk["error"].get("message", chunk["error"]))
                    return
                sent.name = sent.name or chunk.get("id")
                if chunk.get("choices"):
                    trace.token_s.append(t)
                    if trace.first_token_s is None:
                        trace.first_token_s = t
                    piece = chunk["choices"][0].get("text") or ""
                    sent.text += piece
                    if on_token is not None:
                        on_token(t, piece)
                elif chunk.get("usage"):
                    completion_tokens = chunk["usage"].get("completion_tokens")
                    trace.prompt_len = chunk["usage"].get("prompt_tokens", trace.prompt_len)
    except (httpx.HTTPError, ValueError) as e:
        sent.error = f"{type(e).__name__}: {e}"
        return
    if not trace.token_s:
        sent.error = "the stream ended without a token"
        return
    trace.output_len = completion_tokens or len(trace.token_s)
    trace.finish_s = trace.token_s[-1]


async def _server_now(client: httpx.AsyncClient, base: str) -> float | None:
    """The engine's clock now, if the server is ours (it has /v1/engine/stats)."""
    try:
        resp = await client.get(f"{base}/engine/stats")
        return float(resp.json()["now_s"]) if resp.status_code == 200 else None
    except (httpx.HTTPError, ValueError, KeyError, TypeError):
        return None


async def _server_trace(client: httpx.AsyncClient, base: str, since_s: float) -> dict | None:
    try:
        resp = await client.get(f"{base}/engine/trace", params={"since_s": since_s})
        return resp.json() if resp.status_code == 200 else None
    except (httpx.HTTPError, ValueError):
        return None


async def run_async(base_url: str, model: str, requests: list[Request], prompts: list[str],
                    timeout_s: float = DEFAULT_TIMEOUT_S, slo_ttft_ms: float | None = None,
                    slo_tpot_ms: float | None = None,
                    on_ready: Callable[[Endpoint], None] | None = None,
                    on_done: Callable[[int], None] | None = None,
                    stop: Callable[[], bool] | None = None,
                    on_token: Callable[[int, float, str], None] | None = None,
                    load: Load | None = None,
                    follow_up: Callable[[int, str, str], tuple[int, str, float] | None]
                    | None = None) -> BenchResult:
    """Send requests (with these prompt texts) at their arrival times; closed-loop ones (no
    arrival time) each when an earlier one ends; `load` caps, warms up and bounds it (Load).
    With follow_up (multi-turn conversations, conversation.py), a request without an arrival
    time is instead sent when follow_up(id, prompt, answer) of the request before it names it,
    with its prompt text, after the delay it gives. Stops after timeout_s, or within 0.2 s of
    stop() turning True (a lab job cancelled), marking what had not finished as failed and the
    result as cancelled. on_ready is called once the server has been checked, just before the
    first request goes; on_done with the number of requests ended so far, as each one ends
    (for a progress line); on_token(request id, t_s, text) as each token arrives."""
    base = api_base(base_url)
    load = load or Load()
    load.validate()
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
    timeout = httpx.Timeout(timeout_s, connect=CONNECT_TIMEOUT_S)
    async with httpx.AsyncClient(limits=limits, timeout=timeout) as client:
        endpoint = await probe(client, base, model)
        for r in requests:
            if endpoint.context is not None and len(r.prompt_ids) + r.output_len > endpoint.context:
                raise ConfigError(
                    f"prompt of {len(r.prompt_ids)} tokens plus {r.output_len} new tokens "
                    f"exceeds the context of {endpoint.context} that {base} reports for {model}")
        since = await _server_now(client, base)
        if on_ready is not None:
            on_ready(endpoint)
        sent = {r.id: Sent(RequestTrace(r.id, None, len(r.prompt_ids), r.output_len), p,
                           scheduled_s=r.arrival_s)
                for r, p in zip(requests, prompts)}
        launched: set[int] = set()
        slots = asyncio.Semaphore(load.max_concurrency) if load.max_concurrency else None
        timed = sorted((r for r in requests if r.arrival_s is not None),
                       key=lambda r: (r.arrival_s, r.id))
        closed = deque(r for r in requests if r.arrival_s is None and follow_up is None)
        by_id = {r.id: r for r in requests}
        tasks: set[asyncio.Task] = set()
        start = time.perf_counter()

        def clock() -> float:
            return time.perf_counter() - start

        def open_for_sending() -> bool:
            return load.duration_s is None or clock() < load.duration_s

        ended = 0

        async def one(req: Request) -> None:
            nonlocal ended
            tokens = None if on_token is None else (
                lambda t, text, rid=req.id: on_token(rid, t, text))
            mine = sent[req.id]

            async def go() -> None:
                mine.warmup = clock() < load.warmup_s  # sent (its clock starts) now
                await send(client, endpoint, mine, req.output_len, clock, tokens)

            if slots is None:
                await go()
            else:
                async with slots:
                    await go()
            ended += 1
            if on_done is not None:
                on_done(ended)
            if closed and open_for_sending():  # closed loop: an ended request lets one in
                launch(closed.popleft())
            if follow_up is not None and mine.error is None:
                nxt = follow_up(req.id, mine.prompt, mine.text)
                if nxt is not None:
                    next_id, text, delay = nxt
                    sent[next_id].prompt = text
                    sent[next_id].scheduled_s = clock() + delay
                    launch(by_id[next_id], delay)

        async def after(req: Request, delay: float) -> None:
            await asyncio.sleep(delay)
            if open_for_sending():
                launched.add(req.id)
                await one(req)

        def launch(req: Request, delay: float = 0.0) -> None:
            if delay > 0:
                task = asyncio.create_task(after(req, delay))
            else:
                launched.add(req.id)
                task = asyncio.create_task(one(req))
            tasks.add(task)
            task.add_done_callback(tasks.discard)

        def stopped() -> bool:
            return stop is not None and stop()

        async def everything() -> bool:
            """True when every request ended, False when stopped."""
            for req in timed:
                if load.duration_s is not None and req.arrival_s >= load.duration_s:
                    break
                while (wait := req.arrival_s - clock()) > 0:
                    if stopped():
                        return False
                    await asyncio.sleep(min(wait, 0.2))
                launch(req)
            while tasks:
                if stopped():
                    return False
                await asyncio.wait(set(tasks), timeout=0.2)
            return True

        try:
            cancelled = not await asyncio.wait_for(everything(), timeout_s)
        except asyncio.TimeoutError:
            cancelled = True
        if cancelled:
            for task in list(tasks):
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        duration = clock()
        for s in sent.values():
            if s.trace.finished or s.error is not None:
                continue
            if s.trace.id in launched:
                s.error = f"not finished after the benchmark's {timeout_s:g} s"
            elif follow_up is not None:
                s.error = ("not finished: never sent, as an earlier turn of its conversation "
                           "failed or the run ended")
            else:
                s.error = f"not finished after the benchmark's {timeout_s:g} s (never sent)"
        if load.duration_s is None:  # every request counts, sent or not
            launched = set(sent)
        server = await _server_trace(client, base, since) if since is not None else None
    return BenchResult(endpoint, [sent[r.id] for r in requests if r.id in launched], duration,
                       cancelled, slo_ttft_ms, slo_tpot_ms, server, load=load)


def run_bench(*args, **kwargs) -> BenchResult:
    """run_async, with its arguments, on an event loop of its own (for the command line and the
    lab's worker)."""
    return asyncio.run(run_async(*args, **kwargs))
