"""A disaggregated run, live: a prefill worker and a decode worker in processes of their own
(spawned, each building its own engine on the same model), the workload's requests arriving at
the prefill worker on the wall clock, and the run's trace assembled from both workers' records.

Each request's trace: admitted_s when its prefill began, first_token_s when it ended (the first
token comes from the prefill worker), then the decode worker's tokens. Its handover is the time
from its first token to the decode worker holding its KV (copy out, queue, copy in, and any wait
for the decode worker's step in progress). The workers are always ended when the run ends,
normally or not; a worker's error comes back as a one-line DisaggError.
"""

from __future__ import annotations

import queue
import time
from dataclasses import dataclass

from ..config import EngineConfig
from ..errors import ConfigError
from ..serve.metrics import compute_metrics
from ..serve.trace import RequestTrace, StepTrace
from ..serve.workload import Request
from .workers import Done, Finished, Ready, StepRecord, WorkerError, decode_main, prefill_main

START_TIMEOUT_S = 600.0  # a worker builds its engine within this long: a bound for a broken start
JOIN_S = 10.0  # a worker that finished exits within this long, else it is terminated
LEAD_S = 0.05  # the run starts this long after the parent sends the start time


class DisaggError(RuntimeError):
    """A worker failed (its one-line message), died, or never started."""


@dataclass
class DisaggRun:
    """What a live disaggregated run measured: the request traces (DESIGN.md's run shape), each
    request's handover, and each worker's steps."""

    requests: list[RequestTrace]
    steps: list[StepTrace]
    handover_ms: dict[int, float]
    export_ms: dict[int, float]
    kv_bytes: dict[int, int]
    workers: dict[str, dict]


def split_cores(cores: tuple[int, ...]) -> tuple[list[int], list[int]] | None:
    """The prefill worker's cores and the decode worker's (halves of the given ones), or None
    where there are fewer than two: two workers cannot each have one of their own."""
    if len(cores) < 2:
        return None
    half = len(cores) // 2
    return list(cores[:half]), list(cores[half:])


def check_requests(requests: list[Request]) -> None:
    """What the workers serve: timed arrivals (replayed on the wall clock), greedy requests."""
    for r in requests:
        if r.arrival_s is None:
            raise ConfigError("a disaggregated run replays arrival times: the fixed (closed "
                              "loop) workload is not supported")
        if r.sampling is not None and not r.sampling.greedy:
            raise ConfigError("a disaggregated run here is greedy: temperature must be 0")


def run_live(config: EngineConfig, requests: list[Request], max_batch: int,
             cores: tuple[list[int], list[int]] | None = None) -> DisaggRun:
    """Serve requests disaggregated, live (see the module docstring). cores: each worker's
    cores (split_cores), or None to leave both on every core (correct tokens, shared cores)."""
    import torch.multiprocessing as mp

    check_requests(requests)
    ctx = mp.get_context("spawn")
    out, handoff = ctx.Queue(), ctx.Queue()
    prefill_ctl, decode_ctl = ctx.Queue(), ctx.Queue()
    prefill_cores, decode_cores = cores if cores else (None, None)
    procs = {
        "prefill": ctx.Process(target=prefill_main, name="disagg-prefill", daemon=True,
                               args=(config, prefill_cores, prefill_ctl, handoff, out)),
        "decode": ctx.Process(target=decode_main, name="disagg-decode", daemon=True,
                              args=(config, decode_cores, max_batch, decode_ctl, handoff, out)),
    }
    try:
        for p in procs.values():
            p.start()
        workers: dict[str, dict] = {}
        deadline = time.monotonic() + START_TIMEOUT_S
        while len(workers) < 2:
            msg = _next(out, procs, deadline)
            if isinstance(msg, Ready):
                workers[msg.worker] = {"threads": msg.threads, "cores": msg.cores}
        start = time.monotonic() + LEAD_S
        prefill_ctl.put((requests, start))
        decode_ctl.put(start)
        finished: dict[int, Finished] = {}
        steps: list[StepRecord] = []
        done: set[str] = set()
        while len(done) < 2:
            msg = _next(out, procs, None)
            if isinstance(msg, Finished):
                finished[msg.request_id] = msg
            elif isinstance(msg, Done):
                done.add(msg.worker)
                steps += msg.steps
        prefill_ctl.put("stop")  # the decode worker has taken every handover
        for p in procs.values():
            p.join(JOIN_S)
    finally:
        _end(procs, (out, handoff, prefill_ctl, decode_ctl))
    traces = [_trace(r, finished.get(r.id)) for r in requests]
    return DisaggRun(
        requests=traces,
        steps=[_step(i, s) for i, s in enumerate(sorted(steps, key=lambda s: s.start_s))],
        handover_ms={i: 1000 * (f.admitted_s - f.first_token_s) for i, f in finished.items()},
        export_ms={i: 1000 * f.export_s for i, f in finished.items()},
        kv_bytes={i: f.kv_bytes for i, f in finished.items()},
        workers=workers,
    )


def _next(out, procs: dict, deadline: float | None):
    """The next message from a worker; raises DisaggError for a worker's error, a worker that
    died without one, or (deadline given) a start that takes too long."""
    while True:
        try:
            msg = out.get(timeout=0.2)
        except queue.Empty:
            for name, p in procs.items():
                if p.exitcode not in (None, 0):
                    raise DisaggError(f"the {name} worker died (exit code {p.exitcode})") \
                        from None
            if deadline is not None and time.monotonic() > deadline:
                raise DisaggError("the workers did not start in time") from None
            continue
        if isinstance(msg, WorkerError):
            raise DisaggError(f"the {msg.worker} worker failed: {msg.message}")
        return msg


def _end(procs: dict, queues) -> None:
    """Every worker ended: joined if it is finishing, else terminated (then killed)."""
    for p in procs.values():
        if p.pid is None:
            continue
        if p.is_alive():
            p.terminate()
            p.join(JOIN_S)
        if p.is_alive():
            p.kill()
            p.join()
    for q in queues:
        q.close()
        q.cancel_join_thread()


def _trace(r: Request, f: Finished | None) -> RequestTrace:
    trace = RequestTrace(r.id, r.arrival_s, len(r.prompt_ids), r.output_len)
    if f is not None:
        trace.admitted_s = f.prefill_start_s
        trace.first_token_s = f.first_token_s
        trace.token_s = list(f.token_s)
        trace.output_ids = list(f.output_ids)
        trace.finish_s = f.token_s[-1]
        trace.output_len = len(f.token_s)
    return trace


def _step(index: int, s: StepRecord) -> StepTrace:
    return StepTrace(index=index, start_s=s.start_s, end_s=s.end_s,
                     prefill_tokens=s.prefill_tokens, decode_seqs=s.decode_seqs,
                     kv_blocks_used=0, running=s.decode_seqs)


def metrics_of(run: DisaggRun, slo_ttft_ms: float | None, slo_tpot_ms: float | None):
    """The run's metrics, as a colocated run's are computed (serve/metrics.py)."""
    return compute_metrics(run.requests, None, None, slo_ttft_ms, slo_tpot_ms)
