"""Jobs that measure an OpenAI-compatible server over HTTP (engine.lab.endpoint) rather than
the built-in engine: the worker runs the client (engine.serve.bench_client), so a page's
session never talks to the server itself, and one measurement runs at a time as usual."""

from __future__ import annotations

import time

import numpy as np

from ...calc.slo_math import per_user_tokens_per_s
from ...errors import ConfigError
from ...serve.bench_client import EndpointError, run_bench
from ...serve.metrics import e2e_ms, itl_ms, summarize, tpot_ms, ttft_ms
from ...serve.workload import PromptSource, Request, WorkloadSpec, make_workload
from ...tokenizer import Tokenizer
from ..control import Control
from ..registry import Emit
from .serving import mixed_workload, rate_point, sweep_runs

READER_GRACE_S = 0.5  # after the reader's last token, for its stream's end ([DONE]) to arrive


def bench_or_refusal(params: dict, requests, prompts, on_done, control: Control,
                     on_token=None):
    """bench_client.run_bench on the job's endpoint; a server that cannot be used (unreachable,
    not OpenAI-compatible) is the teacher's setting to fix, said in one line (ConfigError)."""
    try:
        return run_bench(params["url"], params["model"], requests, prompts,
                         timeout_s=params["timeout_s"], on_done=on_done, stop=control,
                         on_token=on_token)
    except EndpointError as e:
        raise ConfigError(str(e)) from None


def send_texts(params: dict, tokenizer: Tokenizer, requests, progress, control: Control):
    """The requests with their prompts as text, sent to the job's endpoint (bench_or_refusal),
    progress(0) first and progress(answered) as each ends; None when the job was cancelled."""
    prompts = [tokenizer.decode(r.prompt_ids) for r in requests]
    progress(0)
    bench = bench_or_refusal(params, requests, prompts, progress, control)
    return None if control.cancelled() else bench


def endpoint_load_test_job(params: dict, emit: Emit, control: Control) -> dict | None:
    """The load test's mix (serving.load_test_job's, same seed, same prompts as text) sent at
    its arrival times as streamed completions; the client's trace and metrics."""
    rate, count, long_share = params["rate"], params["requests"], params["long_share"]
    short = (params["short_prompt"], params["short_output"])
    long = (params["long_prompt"], params["long_output"])
    tokenizer = Tokenizer()
    requests, sizes = mixed_workload(tokenizer, rate, count, long_share, short, long,
                                     params["seed"])

    def progress(done: int) -> None:
        emit("progress", {"done": done, "total": count, "message": "requests answered"})

    bench = send_texts(params, tokenizer, requests, progress, control)
    if bench is None:
        return None
    out = bench.to_json()
    errors = [r["error"] for r in out["requests"] if r["error"]]
    keep = ("id", "arrival_s", "admitted_s", "first_token_s", "finish_s", "prompt_len",
            "output_len", "token_s", "preemptions")
    metrics = {k: v for k, v in out["metrics"].items() if k != "failed"}
    return {
        "base_url": out["base_url"], "model": out["model"], "cancelled": out["cancelled"],
        "duration_s": out["duration_s"],
        "requests": [{**{k: r[k] for k in keep}, "size": size}
                     for r, size in zip(out["requests"], sizes)],
        "metrics": metrics, "failed": bench.failed,
        "first_error": errors[0] if errors else None,
        "workload": {"kind": "poisson mix", "rate": rate, "requests": count,
                     "long_share": long_share, "short_prompt": list(short[0]),
                     "short_output": list(short[1]), "long_prompt": list(long[0]),
                     "long_output": list(long[1]), "seed": params["seed"]},
    }


def endpoint_rate_sweep_job(params: dict, emit: Emit, control: Control) -> dict | None:
    """serving.rate_sweep_job's workloads (its seeds, the same prompts as text) sent over HTTP
    at each rate in turn, timed at the client; a "step" event with each run's point."""
    count = params["requests"]
    tokenizer = Tokenizer()
    planned = sweep_runs(params)
    specs = [spec for _rate, _k, spec in planned]
    points = []
    for i, (rate, k, spec) in enumerate(planned):
        def progress(done: int, i: int = i, rate: float = rate) -> None:
            emit("progress", {"done": i * count + done, "total": len(planned) * count,
                              "message": f"requests answered (rate {rate:g} requests/s)"})

        bench = send_texts(params, tokenizer, make_workload(spec, tokenizer), progress, control)
        if bench is None:
            return None
        point = {**rate_point(bench.traces, bench.metrics, rate), "failed": bench.failed,
                 "run": k}
        points.append(point)
        emit("step", {"kind": "rate_point", **point})
    return {"base_url": bench.endpoint.base, "model": bench.endpoint.model,
            "workload": specs[0].to_json(), "points": points}


def endpoint_concurrency_job(params: dict, emit: Emit, control: Control) -> dict | None:
    """N clients streaming at once (lesson 4's knob for a server whose batch size is its own):
    N requests of prompt_len tokens sent together, each asking for new_tokens. Total tokens/s
    over the time until the last answer ended; each user's time per token is the median TPOT."""
    n, prompt_len, new_tokens = params["concurrency"], params["prompt_len"], params["new_tokens"]
    tokenizer = Tokenizer()
    spec = WorkloadSpec(kind="fixed", requests=n, concurrency=n, prompt_len=(prompt_len,) * 2,
                        output_len=(new_tokens,) * 2, seed=params["seed"])
    def progress(done: int) -> None:
        emit("progress", {"done": done, "total": n, "message": "clients answered"})

    bench = send_texts(params, tokenizer, make_workload(spec, tokenizer), progress, control)
    if bench is None:
        return None
    done = [t for t in bench.traces if t.finish_s is not None and t.token_s]
    errors = [s.error for s in bench.sent if s.error]
    tokens = sum(len(t.token_s) for t in done)
    last = max((t.token_s[-1] for t in done), default=None)
    return {
        "base_url": bench.endpoint.base, "model": bench.endpoint.model, "concurrency": n,
        "prompt_len": prompt_len, "new_tokens": new_tokens, "completed": len(done),
        "failed": bench.failed, "first_error": errors[0] if errors else None,
        "ttft_ms": summarize(ttft_ms(t) for t in done).p50,
        "tpot_ms": summarize(v for t in done if (v := tpot_ms(t)) is not None).p50,
        "tokens_per_s": tokens / last if last else None,
    }


def endpoint_stream_job(params: dict, emit: Emit, control: Control) -> dict | None:
    """generation.two_clocks_job over HTTP: the reader's prompt, arriving arrive_after_ms after
    N background requests (so they are decoding already), streamed from the endpoint with a
    "token" event per token as it arrives here (ms after the reader's request was due). The
    background requests are stopped half a second after the reader's last token (time for its
    stream to end), as the engine's job stops when the reader's answer is done."""
    max_new, background = params["max_new_tokens"], params["background"]
    delay_s = params["arrive_after_ms"] / 1000 if background else 0.0
    tokenizer = Tokenizer()
    source = PromptSource(tokenizer)
    rng = np.random.default_rng(params["seed"])
    requests = [Request(id=0, prompt_ids=tokenizer.encode(params["prompt"]),
                        output_len=max_new, arrival_s=delay_s)]
    requests += [Request(id=i, prompt_ids=source.prompt(params["background_prompt_len"], rng),
                         output_len=2 * max_new + 64, arrival_s=0.0)
                 for i in range(1, background + 1)]
    prompts = [params["prompt"]] + [tokenizer.decode(r.prompt_ids) for r in requests[1:]]
    texts: list[str] = []
    last_token_at: float | None = None

    def on_token(request_id: int, t_s: float, text: str) -> None:
        nonlocal last_token_at
        if request_id == 0:
            emit("token", {"index": len(texts), "text": text, "t_ms": 1000 * (t_s - delay_s)})
            texts.append(text)
            if len(texts) >= max_new:
                last_token_at = time.monotonic()

    def stop() -> bool:
        return control.cancelled() or (last_token_at is not None
                               and time.monotonic() - last_token_at > READER_GRACE_S)

    bench = bench_or_refusal(params, requests, prompts, None, stop, on_token)
    if control.cancelled():
        return None
    reader = bench.sent[0]
    trace = reader.trace
    if not trace.finished:
        raise ConfigError(f"no complete answer from {bench.endpoint.base}: "
                          f"{reader.error or 'the stream did not end'}")
    errors = [s.error for s in bench.sent[1:]
              if s.error and not s.error.startswith("not finished")]  # not: stopped by us
    tpot = tpot_ms(trace)
    return {
        "base_url": bench.endpoint.base, "model": bench.endpoint.model,
        "prompt_tokens": trace.prompt_len, "max_new_tokens": max_new, "background": background,
        "text": "".join(texts),
        "tokens": [{"text": text, "t_ms": 1000 * (t - trace.arrival_s)}
                   for text, t in zip(texts, trace.token_s)],
        "ttft_ms": ttft_ms(trace), "tpot_ms": tpot,
        "itl_ms": summarize(itl_ms(trace)).to_json(), "e2e_ms": e2e_ms(trace),
        "user_tokens_per_s": per_user_tokens_per_s(tpot), "output_tokens": len(trace.token_s),
        "background_failed": len(errors), "first_error": errors[0] if errors else None,
    }
