"""Jobs that run the real-time serving loop (engine.serve.loop.run).

- `serve_run`: the `python -m engine run` command as a job: a seeded workload served under a
  policy, with each step, request change and token streamed as events while it runs, and the
  run's JSON (the command's shape) as the result.
- `load_test`: Poisson arrivals of a mix of short and long requests, served under continuous
  batching; "progress" events as requests finish; the `run` JSON with each request's size class.
- `block_snapshots`: a small seeded workload, with the block table of every live sequence
  recorded after every step.
- `rate_sweep`: the same kind of Poisson workload served at several request rates; per rate,
  each request's TTFT, TPOT and E2E (so targets can be applied afterwards, in the page) with the
  run's throughput.

A run takes seconds to tens of seconds, and a reader who just opened its page has no number until
it ends; so serve_run, load_test and rate_sweep put a first figure in their "progress" events as
soon as a request is answered ("so_far": SoFar, the median end-to-end latency of the requests
answered so far; widgets.job_status shows it labelled as partial).
"""

from __future__ import annotations

import time

import numpy as np

from ...scheduler import SchedulerConfig
from ...serve.loop import run
from ...serve.metrics import Metrics, e2e_ms, itl_ms, summarize, tpot_ms, ttft_ms
from ...serve.trace import RequestEvent, StepEvent, TokenEvent, event_to_json
from ...serve.workload import PromptSource, Request, WorkloadSpec, make_workload, poisson_arrivals
from ..control import Control
from ..quality import spread
from ..registry import Emit
from .engines import engine_from_params, fit_kv, resident_lengths

PROGRESS_EVERY_S = 0.25  # progress events of serving jobs: a few a second, not one a step


class Every:
    """True at most once per period (the first call included)."""

    def __init__(self, period_s: float):
        self.period_s = period_s
        self._last = -float("inf")

    def due(self) -> bool:
        now = time.monotonic()
        if now - self._last >= self.period_s:
            self._last = now
            return True
        return False


class SoFar:
    """The requests answered so far in one run and their median end-to-end latency (arrival
    to last token, on the run's clock): a partial figure a page can show while the run goes on.
    Fed the run's RequestEvents."""

    def __init__(self):
        self._arrived: dict[int, float] = {}
        self._e2e_ms: list[float] = []

    def add(self, event) -> bool:
        """Take one event of the run; True if it was a request answered."""
        if not isinstance(event, RequestEvent):
            return False
        if event.kind == "arrived":
            self._arrived[event.request_id] = event.t_s
        elif event.kind == "finished" and event.request_id in self._arrived:
            self._e2e_ms.append(1000 * (event.t_s - self._arrived[event.request_id]))
            return True
        return False

    @property
    def answered(self) -> int:
        return len(self._e2e_ms)

    def to_json(self) -> dict:
        return {"answered": self.answered,
                "e2e_p50_ms": float(np.median(self._e2e_ms)) if self._e2e_ms else None}

    def emit(self, emit: Emit, total: int, message: str) -> None:
        """A "progress" event: requests answered of total, with the figure so far."""
        emit("progress", {"done": self.answered, "total": total, "message": message,
                          "so_far": self.to_json()})


def scheduler_config(params: dict, **fixed) -> SchedulerConfig:
    """The scheduler settings of checked params (fixed: settings the job decides itself)."""
    values = {"policy": params.get("policy"), "max_batch": params["max_batch"],
              "timeout_ms": params.get("timeout_ms"), "chunk_size": params["chunk_size"],
              "max_tokens_per_step": params.get("max_tokens_per_step"), **fixed}
    config = SchedulerConfig(**values)
    config.validate()
    return config


def workload_spec(params: dict, **fixed) -> WorkloadSpec:
    """The workload of checked params (fixed: settings the job decides itself)."""
    values = {"kind": params.get("workload"), "requests": params["requests"],
              "rate": params.get("rate"), "burstiness": params.get("burstiness"),
              "concurrency": params.get("concurrency"), "prompt_len": params["prompt_len"],
              "output_len": params["output_len"], "long_prompt_len": params.get("long_prompt_len"),
              "long_at_s": params.get("long_at"), "seed": params["seed"], **fixed}
    spec = WorkloadSpec(**values)
    spec.validate()
    return spec


# The settings of jobs that serve a plain Poisson workload under continuous batching.
POISSON = {"kind": "poisson", "burstiness": 1.0, "concurrency": 1, "long_prompt_len": 1,
           "long_at_s": 0.0}
CONTINUOUS = {"policy": "continuous", "timeout_ms": 0.0, "max_tokens_per_step": None}


def step_spread(steps) -> dict:
    """The spread of the engine steps of one or more runs (StepTrace or their JSON)."""
    def ms(step) -> float:
        if isinstance(step, dict):
            return 1000 * (step["end_s"] - step["start_s"])
        return 1000 * (step.end_s - step.start_s)

    return spread((ms(s) for s in steps), "engine step")


def run_requests(engine, requests, config, emit: Emit, control: Control,
                 slo_ttft_ms=None, slo_tpot_ms=None, stream_tokens: bool = True,
                 extra: dict | None = None) -> dict | None:
    """Serve requests, streaming "step", "request" (arrived, admitted, preempted, finished) and,
    if stream_tokens, "token" events, each with event_to_json's fields, and "progress" with the
    figure so far (SoFar) as requests are answered; returns the run's JSON."""
    so_far, total = SoFar(), len(requests)

    def on_event(event) -> None:
        if so_far.add(event):
            so_far.emit(emit, total, "requests answered")
        if isinstance(event, TokenEvent) and not stream_tokens:
            return
        kind = "step" if isinstance(event, StepEvent) else \
            "request" if isinstance(event, RequestEvent) else "token"
        emit(kind, event_to_json(event))

    # the pool's size, for the share of it the steps' kv_blocks_used are (engine.lab.metrics)
    emit("progress", {"done": 0, "total": total, "message": "requests answered",
                      "kv_blocks_total": engine.blocks.num_blocks})
    result = run(engine, requests, config, on_event=on_event, cancelled=control,
                 slo_ttft_ms=slo_ttft_ms, slo_tpot_ms=slo_tpot_ms,
                 stream_text=stream_tokens)
    if result.cancelled:
        return None
    result.extra.update(extra or {})
    return {**result.to_json(), "spread": step_spread(result.steps)}


def serve_run_job(params: dict, emit: Emit, control: Control) -> dict | None:
    """A seeded workload served in real time under a batching policy (`python -m engine run`)."""
    spec = workload_spec(params)
    config = scheduler_config(params)
    engine = engine_from_params(params)
    requests = make_workload(spec, engine.tokenizer)
    fit_kv(engine, resident_lengths(requests, config.max_batch))
    return run_requests(
        engine, requests, config, emit, control,
        slo_ttft_ms=params["slo_ttft_ms"], slo_tpot_ms=params["slo_tpot_ms"],
        stream_tokens=params["stream_tokens"], extra={"workload": spec.to_json()},
    )


# ---- a load test with a mix of short and long requests -----------------------------------------
def mixed_workload(tokenizer, rate: float, count: int, long_share: float,
                   short: tuple[tuple[int, int], tuple[int, int]],
                   long: tuple[tuple[int, int], tuple[int, int]], seed: int, users: int = 0):
    """Open loop (users 0): Poisson arrivals at `rate`. Closed loop (users N): N requests at
    t = 0, each later one released when one finishes (arrival None, engine.serve.workload's
    "fixed"). Each request long with probability long_share, else short; prompt and output
    lengths uniform in the class's ranges. Returns (requests, sizes)."""
    rng = np.random.default_rng(seed)
    arrivals = poisson_arrivals(count, rate, rng)  # drawn either way: the same sizes follow
    if users:
        arrivals = [0.0] * min(count, users) + [None] * max(0, count - users)
    is_long = (rng.random(count) < long_share).tolist()
    source = PromptSource(tokenizer)
    requests, sizes = [], []
    for i, (arrival, big) in enumerate(zip(arrivals, is_long)):
        (p_lo, p_hi), (o_lo, o_hi) = long if big else short
        prompt_len = int(rng.integers(p_lo, p_hi + 1))
        output_len = int(rng.integers(o_lo, o_hi + 1))
        requests.append(Request(id=i, prompt_ids=source.prompt(prompt_len, rng),
                                output_len=output_len,
                                arrival_s=None if arrival is None else float(arrival)))
        sizes.append("long" if big else "short")
    return requests, sizes


def load_test_job(params: dict, emit: Emit, control: Control) -> dict | None:
    """Short and long requests under continuous batching, arriving open-loop (Poisson at a
    rate) or closed-loop (`users` concurrent users): the tail."""
    rate, count, long_share = params["rate"], params["requests"], params["long_share"]
    users = params.get("users", 0)
    short = (params["short_prompt"], params["short_output"])
    long = (params["long_prompt"], params["long_output"])
    config = SchedulerConfig(policy="continuous", max_batch=params["max_batch"],
                             chunk_size=params["chunk_size"])
    seed = params["seed"]
    engine = engine_from_params(params)
    requests, sizes = mixed_workload(engine.tokenizer, rate, count, long_share, short, long, seed,
                                     users)
    fit_kv(engine, resident_lengths(requests, config.max_batch))
    so_far = SoFar()

    def on_event(event) -> None:
        if so_far.add(event):
            so_far.emit(emit, count, "requests answered")

    emit("progress", {"done": 0, "total": count, "message": "requests answered"})
    result = run(engine, requests, config, on_event=on_event, cancelled=control)
    if result.cancelled:
        return None
    out = result.to_json()
    for request, size in zip(out["requests"], sizes):
        request["size"] = size
    out["workload"] = {"kind": "closed-loop mix" if users else "poisson mix", "rate": rate,
                       "users": users, "requests": count,
                       "long_share": long_share, "short_prompt": list(short[0]),
                       "short_output": list(short[1]), "long_prompt": list(long[0]),
                       "long_output": list(long[1]), "seed": seed}
    out["spread"] = step_spread(result.steps)
    return out


# ---- block tables of live sequences --------------------------------------------------------------
def record_block_tables(engine, snapshots: list) -> object:
    """Wrap engine.step so that after every step the block table of each sequence in it is
    appended to snapshots; returns a function that removes the wrapper."""
    original = engine.step

    def step(decode, prefill, padding=0):
        tokens = original(decode, prefill, padding)
        seqs = [(s, "decode") for s in decode] + [(s, "prefill") for s, _ in prefill]
        snapshots.append({
            "seqs": [{"id": s.id, "blocks": list(s.block_table), "tokens": s.num_computed,
                      "phase": phase} for s, phase in seqs],
            "free": engine.blocks.num_free,
        })
        return tokens

    engine.step = step
    return lambda: engine.__dict__.pop("step", None)


def block_snapshots_job(params: dict, emit: Emit, control: Control) -> dict | None:
    """A small Poisson workload served for real, with every step's block tables recorded."""
    spec = workload_spec(params, **POISSON)
    config = scheduler_config(params, **CONTINUOUS)
    engine = engine_from_params(params)  # its kv_budget_mib is explicit: the pool is the lesson
    requests = make_workload(spec, engine.tokenizer)
    snapshots: list[dict] = []
    total = sum(r.output_len for r in requests)
    produced = [0]
    every = Every(PROGRESS_EVERY_S)

    def on_event(event) -> None:
        if isinstance(event, TokenEvent):
            produced[0] += 1
        elif isinstance(event, StepEvent):
            step = event.step
            snapshots[-1].update({"step": step.index, "t_s": step.end_s,
                                  "finished": list(step.finished_ids)})
            if every.due():
                emit("progress", {"done": min(produced[0], total), "total": total,
                                  "message": "serving"})

    unwrap = record_block_tables(engine, snapshots)
    try:
        result = run(engine, requests, config, on_event=on_event, cancelled=control)
    finally:
        unwrap()
    if result.cancelled:
        return None
    return {
        "device": engine.device, "preset": params["preset"], "weights": result.weights,
        "num_blocks": engine.blocks.num_blocks, "block_size": engine.cache.block_size,
        "bytes_per_block": engine.cache.bytes_per_block,
        "kv_budget_mib": params["kv_budget_mib"],
        "requests": [{"id": r.id, "arrival_s": r.arrival_s, "finish_s": r.finish_s,
                      "prompt_len": r.prompt_len, "output_len": r.output_len,
                      "preemptions": r.preemptions} for r in result.requests],
        "snapshots": snapshots,
        "spread": step_spread(result.steps),
    }


# ---- throughput and per-request latencies against the request rate --------------------------------
def rate_point(traces: list, m: Metrics, rate: float) -> dict:
    """One rate's figures from a run's request traces and metrics (the engine's run, or a
    client's over HTTP): per-request lists (for SLOs applied later) and totals."""
    done = [r for r in traces if r.finish_s is not None and r.token_s]
    itl = summarize(gap for r in done for gap in itl_ms(r))
    return {
        "rate": rate, "requests": len(traces), "completed": m.completed,
        "duration_s": m.duration_s, "output_tokens": m.output_tokens,
        "throughput_tok_s": m.throughput_tok_s, "requests_per_s": m.requests_per_s,
        "ttft_ms": [ttft_ms(r) for r in done], "tpot_ms": [tpot_ms(r) for r in done],
        "e2e_ms": [e2e_ms(r) for r in done], "output_len": [len(r.token_s) for r in done],
        "itl_p50_ms": itl.p50, "itl_p99_ms": itl.p99, "itl_max_ms": itl.max,
        "preemptions": m.preemptions, "slot_use": m.slot_use,
    }


def sweep_runs(params: dict) -> list[tuple[float, int, WorkloadSpec]]:
    """(rate, run, workload) of a rate sweep, rate by rate: `runs` runs at each rate, run k
    (from 1) with seed + k - 1, so each run is other requests at other moments and every rate
    gets the same set of runs."""
    return [(rate, k, workload_spec({**params, "seed": params["seed"] + k - 1}, **POISSON,
                                    rate=rate))
            for rate in params["rates"] for k in range(1, params["runs"] + 1)]


def rate_sweep_job(params: dict, emit: Emit, control: Control) -> dict | None:
    """The same Poisson workloads (`runs` seeds) served at each rate in turn; a "step" event
    with each run's point as it finishes."""
    config = scheduler_config(params, **CONTINUOUS)
    planned = sweep_runs(params)
    specs = [spec for _rate, _k, spec in planned]
    engine = engine_from_params(params)
    workloads = [make_workload(spec, engine.tokenizer) for spec in specs]
    fit_kv(engine, max((resident_lengths(w, config.max_batch) for w in workloads), key=sum))
    total = sum(r.output_len for w in workloads for r in w)
    done = [0]
    every = Every(PROGRESS_EVERY_S)

    def on_event(event) -> None:
        if isinstance(event, TokenEvent):
            done[0] += 1
        elif so_far.add(event) or (isinstance(event, StepEvent) and every.due()):
            emit("progress", {"done": min(done[0], total), "total": total,
                              "message": f"rate {rate:g} requests/s, run {k} of "
                                         f"{params['runs']}", "so_far": so_far.to_json()})

    points, steps = [], []
    for (rate, k, _spec), requests in zip(planned, workloads, strict=True):
        so_far = SoFar()  # this run's requests: one rate's figure, never a mix of rates
        result = run(engine, requests, config, on_event=on_event, cancelled=control)
        if result.cancelled:
            return None
        steps += result.steps
        point = {**rate_point(result.requests, result.metrics, rate), "run": k}
        points.append(point)
        emit("step", {"kind": "rate_point", **point})
    return {"device": engine.device, "preset": params["preset"],
            "weights": "random" if engine.config.random_weights else engine.model_config.weights,
            "max_batch": config.max_batch, "chunk_size": config.chunk_size,
            "workload": specs[0].to_json(), "points": points, "spread": step_spread(steps)}
