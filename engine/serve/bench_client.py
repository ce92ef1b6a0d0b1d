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

Against our own server, the engine's trace of the same requests (GET /v1/engine/trace, matched
by response id) gives the server's side of each one. The client's TTFT and E2E are the server's
plus the network and the HTTP server's queueing, which is reported as their difference. The two
clocks are lined up by the only offsets causality allows (a request was sent before the server
got it, and each token was made before the client got it), so the engine's steps can be drawn on
the client's clock.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections import deque
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from functools import cached_property

import httpx

from ..errors import ConfigError
from ..lab.endpoint import api_base
from .metrics import Metrics, compute_metrics, e2e_ms, summarize, ttft_ms
from .report import DEFAULT_PERCENTILES, SLOs, slo_report, vllm_result
from .trace import RequestTrace, StepTrace
from .workload import Request

CONNECT_TIMEOUT_S = 10.0


class EndpointError(Exception):
    """The server cannot be used (unreachable, no such model, not OpenAI-compatible)."""


@dataclass
class Endpoint:
    """What the server says about the model before the run."""

    base: str
    model: str
    context: int | None  # max_model_len, when the server reports it
    weights: str | None = None


@dataclass(frozen=True)
class Load:
    """How the requests are let out, beyond their arrival times (vLLM's and GuideLLM's knobs).

    max_concurrency caps the requests outstanding at once: one due while the cap is reached
    waits for a slot, and its clock starts when it is sent (as vLLM's --max-concurrency, so the
    wait is not in its TTFT; the time it was due stays in `scheduled_s`). Requests sent in the
    first warmup_s seconds are warm-up: sent, answered and listed, but left out of the metrics.
    duration_s stops sending after that many seconds; what was sent is still awaited (within
    the timeout), and requests never sent are left out of the result."""

    max_concurrency: int | None = None
    warmup_s: float = 0.0
    duration_s: float | None = None

    def validate(self) -> None:
        if self.max_concurrency is not None and self.max_concurrency < 1:
            raise ConfigError(f"max concurrency must be at least 1 (got {self.max_concurrency})")
        if not (self.warmup_s >= 0 and math.isfinite(self.warmup_s)):
            raise ConfigError(f"warm-up must be 0 s or more (got {self.warmup_s})")
        if self.duration_s is not None:
            if not (self.duration_s > 0 and math.isfinite(self.duration_s)):
                raise ConfigError(f"duration must be above 0 s (got {self.duration_s})")
            if self.warmup_s >= self.duration_s:
                raise ConfigError(f"the warm-up ({self.warmup_s:g} s) must end before the "
                                  f"duration ({self.duration_s:g} s) does")

    def to_json(self) -> dict:
        return asdict(self)


@dataclass
class Sent:
    """One request as the client saw it: its trace, the server's id for it, and any error.
    scheduled_s is when it was due (None: closed loop); warmup marks a warm-up request."""

    trace: RequestTrace
    prompt: str
    name: str | None = None
    error: str | None = None
    scheduled_s: float | None = None
    warmup: bool = False
    text: str = ""  # the answer as it streamed
    tags: dict = field(default_factory=dict)  # e.g. a multi-turn request's conversation, turn

    def to_json(self) -> dict:
        return {**self.trace.to_json(), "name": self.name, "error": self.error,
                "scheduled_s": self.scheduled_s, "warmup": self.warmup, **self.tags}


@dataclass
class BenchResult:
    """A client-side run; to_json() gives the `run` command's shape plus the comparison."""

    endpoint: Endpoint
    sent: list[Sent]
    duration_s: float
    cancelled: bool
    slo_ttft_ms: float | None = None
    slo_tpot_ms: float | None = None
    server: dict | None = None  # the engine's trace of the same requests, when it has one
    extra: dict = field(default_factory=dict)
    load: Load = field(default_factory=Load)
    slo_itl_ms: float | None = None
    slo_e2e_ms: float | None = None

    @property
    def slos(self) -> SLOs:
        return SLOs(self.slo_ttft_ms, self.slo_tpot_ms, self.slo_itl_ms, self.slo_e2e_ms)

    @property
    def measured(self) -> list[Sent]:
        """The requests the metrics count: every one sent but the warm-up."""
        return [s for s in self.sent if not s.warmup]

    @property
    def traces(self) -> list[RequestTrace]:
        return [s.trace for s in self.measured]

    @property
    def warmup_requests(self) -> int:
        return sum(s.warmup for s in self.sent)

    @property
    def failed(self) -> int:
        return sum(s.error is not None for s in self.measured)

    @cached_property
    def metrics(self) -> Metrics:
        """The client's metrics, over the requests that finished; goodput counts the requests
        meeting every SLO given, the ITL and E2E ones too (report.py)."""
        metrics = compute_metrics(self.traces, slo_ttft_ms=self.slo_ttft_ms,
                                  slo_tpot_ms=self.slo_tpot_ms)
        report = self.slo
        if report is None:
            return metrics
        return replace(metrics, goodput_rps=report["goodput_rps"],
                       requests_meeting_slo=report["requests_meeting_slo"])

    @cached_property
    def slo(self) -> dict | None:
        """Attainment of each SLO, goodput and good-token throughput (report.slo_report)."""
        duration = compute_metrics(self.traces).duration_s
        return slo_report(self.traces, self.slos, duration)

    def vllm_result(self, request_rate: float, burstiness: float,
                    percentiles=DEFAULT_PERCENTILES) -> dict:
        """This run under `vllm bench serve --save-result`'s keys, ours added (report.py)."""
        return vllm_result(self.traces, self.failed, self.metrics.duration_s,
                           model=self.endpoint.model, request_rate=request_rate,
                           burstiness=burstiness, max_concurrency=self.load.max_concurrency,
                           slos=self.slos, percentiles=percentiles,
                           extra={"source": "llm-serving-speed bench-client",
                                  "base_url": self.endpoint.base,
                                  "warmup_requests": self.warmup_requests,
                                  "cancelled": self.cancelled, **self.extra})

    @cached_property
    def comparison(self) -> dict | None:
        """The engine's side of the same requests (see `compare`), when the server has one."""
        return compare(self.sent, self.server) if self.server else None

    def track_of(self) -> dict[int, int]:
        """Engine request id -> client request id, for the requests the server's trace matched
        (perfetto.chrome_trace draws the engine's prefill chunks on the client's tracks)."""
        by_name = {s.name: s.trace.id for s in self.sent if s.name}
        comparison = self.comparison or {"requests": []}
        return {r["id"]: by_name[r["name"]] for r in comparison["requests"]
                if r["name"] in by_name}

    def to_json(self) -> dict:
        server = self.server or {}
        comparison = self.comparison
        steps = []
        if comparison and comparison["clock_offset_s"] is not None:
            steps = shift_steps(server["steps"], comparison["clock_offset_s"])
        return {
            "device": server.get("device"),
            "preset": self.endpoint.model,
            "weights": self.endpoint.weights,
            "policy": server.get("policy"),
            "source": "client",
            "base_url": self.endpoint.base,
            "model": self.endpoint.model,
            **self.extra,
            "config": server.get("config"),
            "cancelled": self.cancelled,
            "duration_s": self.duration_s,
            "load": {**self.load.to_json(), "warmup_requests": self.warmup_requests,
                     "note": "warm-up requests are sent and listed but left out of the metrics"
                     if self.warmup_requests else None},
            "requests": [s.to_json() for s in self.sent],
            "steps": steps,
            "metrics": {**self.metrics.to_json(), "failed": self.failed},
            "slo": self.slo,
            "server": comparison,
        }


# ---- the server's side ---------------------------------------------------------------------------
def compare(sent: list[Sent], server: dict) -> dict:
    """The engine's trace against the client's, request by request (matched by response id).

    For each request: client TTFT - server TTFT and client E2E - server E2E are the time spent
    outside the engine (network, HTTP parsing, tokenizing, the event loop), never negative.
    The clock offset (client clock - server clock) must lie between the largest (sent - server
    arrival) and the smallest (client token time - server token time); its midpoint lines the
    steps up, and half the interval is how far off it can be."""
    by_name = {r["name"]: r for r in server.get("requests", []) if r.get("name")}
    pairs = [(s.trace, by_name[s.name]) for s in sent
             if s.name in by_name and s.trace.finished and by_name[s.name]["finish_s"]]
    mine = [_trace(r) for _, r in pairs]
    lo = max((c.arrival_s - s.arrival_s for c, s in zip((c for c, _ in pairs), mine)),
             default=None)
    hi = min((ct - st for (c, _), s in zip(pairs, mine)
              for ct, st in zip(c.token_s, s.token_s)), default=None)
    offset = error = None
    if lo is not None and hi is not None and lo <= hi:
        offset, error = (lo + hi) / 2, (hi - lo) / 2
    return {
        "requests_matched": len(pairs),
        "metrics": compute_metrics(mine, [_step(s) for s in server.get("steps", [])],
                                   (server.get("config") or {}).get("max_batch")).to_json(),
        "ttft_gap_ms": summarize(ttft_ms(c) - ttft_ms(s) for (c, _), s in zip(pairs, mine))
        .to_json(),
        "e2e_gap_ms": summarize(e2e_ms(c) - e2e_ms(s) for (c, _), s in zip(pairs, mine))
        .to_json(),
        "clock_offset_s": offset,
        "clock_offset_error_s": error,
        "clock_offset_bounds_s": [lo, hi],
        "requests": [{"name": r["name"], "id": r["id"], "arrival_s": r["arrival_s"],
                      "admitted_s": r["admitted_s"], "first_token_s": r["first_token_s"],
                      "finish_s": r["finish_s"], "output_len": r["output_len"],
                      "token_s": r["token_s"]} for _, r in pairs],
    }


def _trace(r: dict) -> RequestTrace:
    return RequestTrace(id=r["id"], arrival_s=r["arrival_s"], prompt_len=r["prompt_len"],
                        output_len=r["output_len"], admitted_s=r["admitted_s"],
                        first_token_s=r["first_token_s"], finish_s=r["finish_s"],
                        token_s=list(r["token_s"]), preemptions=r.get("preemptions", 0))


def _step(s: dict) -> StepTrace:
    return StepTrace(index=s["index"], start_s=s["start_s"], end_s=s["end_s"],
                     prefill_tokens=s["prefill_tokens"], decode_seqs=s["decode_seqs"],
                     kv_blocks_used=s["kv_blocks_used"], running=s["running"])


def shift_steps(steps: list[dict], offset_s: float) -> list[dict]:
    """The engine's steps on the client's clock."""
    return [{**s, "start_s": s["start_s"] + offset_s, "end_s": s["end_s"] + offset_s}
            for s in steps]


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
                    timeout_s: float, slo_ttft_ms: float | None = None,
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


def run_bench(base_url: str, model: str, requests: list[Request], prompts: list[str],
              timeout_s: float = 600.0, slo_ttft_ms: float | None = None,
              slo_tpot_ms: float | None = None,
              on_ready: Callable[[Endpoint], None] | None = None,
              on_done: Callable[[int], None] | None = None,
              stop: Callable[[], bool] | None = None,
              on_token: Callable[[int, float, str], None] | None = None,
              load: Load | None = None,
              follow_up: Callable[[int, str, str], tuple[int, str, float] | None]
              | None = None) -> BenchResult:
    """run_async on an event loop of its own (for the command line and the lab's worker)."""
    return asyncio.run(run_async(base_url, model, requests, prompts, timeout_s, slo_ttft_ms,
                                 slo_tpot_ms, on_ready, on_done, stop, on_token, load,
                                 follow_up))
