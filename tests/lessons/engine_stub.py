"""A stand-in for the engine service in lesson tests (no worker, no model): it answers each job
kind with a small result of the real shape, built from the job's parameters, and delivers the
events synchronously, as SessionJobs does outside a served session.

Results are made up but self-consistent (derived from the presets' real shapes where the page
checks arithmetic); kv_allocation runs the real job, which only allocates a few small caches.
"""

from __future__ import annotations

import itertools

from engine import jobs
from engine.config import PRESETS
from engine.service import Job, JobEvent
from engine.step_cost import prefill_cost
from lessons.session_jobs import SessionJobs

DEVICE, WHEN = "cpu: Test CPU (2 cores)", "2026-11-22T02:48:18+0000"


def info_result(params: dict) -> dict:
    return {"device": "cpu", "device_name": DEVICE, "torch": "2.13.0", "threads": 2,
            "presets": [cfg.describe("cpu") for cfg in PRESETS.values()],
            "memory_bandwidth_gbs": 30.0, "matmul_gflops": 180.0, "matmul_dtype": "float32",
            "ridge_flop_per_byte": 6.0, "limits_measured_at": WHEN}


def sweep_point_result(p: dict) -> dict:
    shape = PRESETS[p["preset"]].describe("cpu")
    b = p["batch_size"]
    return {"device": "cpu", "preset": p["preset"], "weights": shape["weights"],
            "backend": "torch", "weight_bytes": shape["weight_bytes"], "batch_size": b,
            "prompt_len": p["prompt_len"], "new_tokens": p["new_tokens"],
            "ttft_ms": 5.0 * b, "tpot_ms": 20.0 + 2.0 * b, "tokens_per_s": b / (0.02 + 0.002 * b)}


def prefill_point_result(p: dict) -> dict:
    shape = PRESETS[p["preset"]].describe("cpu")
    cost = prefill_cost(shape, p["prompt_len"], p["batch_size"])
    ms = cost.flops / 100e9 * 1000  # 100 GFLOP/s
    return {"device": "cpu", "preset": p["preset"], "weights": shape["weights"],
            "batch_size": p["batch_size"], "prompt_len": p["prompt_len"], "ms": ms,
            "ms_all": [ms], "flops": cost.flops, "bytes": cost.bytes,
            "intensity": cost.intensity, "achieved_gflops": 100.0}


def kv_allocation_result(p: dict) -> dict:
    return jobs.run("kv_allocation", p, lambda *_: None, lambda: False)


def block_snapshots_result(p: dict) -> dict:
    snaps = [
        {"step": 0, "t_s": 0.01, "free": 38, "finished": [],
         "seqs": [{"id": 0, "blocks": [0, 1], "tokens": 20, "phase": "prefill"}]},
        {"step": 1, "t_s": 0.02, "free": 35, "finished": [],
         "seqs": [{"id": 0, "blocks": [0, 1], "tokens": 21, "phase": "decode"},
                  {"id": 1, "blocks": [2, 3, 4], "tokens": 40, "phase": "prefill"}]},
        {"step": 2, "t_s": 0.03, "free": 37, "finished": [0],
         "seqs": [{"id": 2, "blocks": [0, 1, 5], "tokens": 33, "phase": "prefill"}]},
    ]
    return {"device": "cpu", "preset": "tiny", "weights": "trained", "num_blocks": 40,
            "block_size": 16, "bytes_per_block": 49152, "kv_budget_mib": 2,
            "requests": [{"id": i, "arrival_s": 0.0, "finish_s": 0.03, "prompt_len": 20,
                          "output_len": 2, "preemptions": 0} for i in range(3)],
            "snapshots": snaps}


def serve_run_result(p: dict) -> dict:
    """An interference run: short requests tick every 10 ms, the long prompt's prefill stalls
    them by 300 ms whole, or by 40 ms per chunk."""
    n, out = p["requests"], p["output_len"][0]
    chunked = p["chunk_size"] > 0
    times, t = [], 0.01
    for i in range(out):
        t += 0.040 if chunked and 20 <= i < 26 else 0.300 if not chunked and i == 20 else 0.010
        times.append(round(t, 6))
    long_first = 0.2 + (0.33 if chunked else 0.31)
    requests = [{"id": i, "arrival_s": 0.0, "admitted_s": 0.0, "first_token_s": times[0],
                 "finish_s": times[-1], "prompt_len": 64, "output_len": out, "token_s": times,
                 "preemptions": 0} for i in range(n)]
    requests.append({"id": n, "arrival_s": p["long_at"], "admitted_s": p["long_at"],
                     "first_token_s": long_first, "finish_s": long_first + 0.1,
                     "prompt_len": p["long_prompt_len"], "output_len": 2,
                     "token_s": [long_first, long_first + 0.1], "preemptions": 0})
    chunks = 6 if chunked else 1
    steps = [{"index": k, "start_s": 0.0, "end_s": 0.0, "prefill_tokens": 1, "decode_seqs": n,
              "decode_ids": list(range(n)), "prefill_chunks": [[n, 1]] if k < chunks else [],
              "kv_blocks_used": 1, "running": n + 1, "admitted_ids": [], "preempted_ids": [],
              "finished_ids": []} for k in range(8)]
    return {"device": "cpu", "preset": "tiny", "weights": "trained", "policy": "continuous",
            "requests": requests, "steps": steps, "metrics": {}}


def rate_sweep_result(p: dict) -> dict:
    """Capacity of 4 requests/s: above it TTFT grows with the rate."""
    points = []
    for rate in p["rates"]:
        n = p["requests"]
        late = rate > 4
        ttft = [100.0 + (900.0 * i * rate / 4 if late else 0) for i in range(n)]
        tpot = [30.0 if p["max_batch"] <= 8 else 60.0] * n
        outputs = [40] * n
        duration = n / min(rate, 4.0)
        points.append({"rate": rate, "requests": n, "completed": n, "duration_s": duration,
                       "output_tokens": sum(outputs), "throughput_tok_s": sum(outputs) / duration,
                       "requests_per_s": n / duration, "ttft_ms": ttft, "tpot_ms": tpot,
                       "e2e_ms": [a + 39 * b for a, b in zip(ttft, tpot, strict=True)],
                       "output_len": outputs, "itl_p50_ms": tpot[0], "itl_p99_ms": 2 * tpot[0],
                       "itl_max_ms": 3 * tpot[0], "preemptions": 0, "slot_use": 0.5})
    return {"device": "cpu", "preset": "tiny", "weights": "trained",
            "max_batch": p["max_batch"], "chunk_size": 128, "workload": {}, "points": points}


BUILDERS = {"info": info_result, "sweep_point": sweep_point_result,
            "prefill_point": prefill_point_result, "kv_allocation": kv_allocation_result,
            "block_snapshots": block_snapshots_result, "serve_run": serve_run_result,
            "rate_sweep": rate_sweep_result}


class StubService:
    """Answers every job at once; `fail` maps a kind to the error message it gets instead;
    `hold` keeps the jobs of the kinds named unanswered until `release()`."""

    def __init__(self, fail: dict | None = None, hold: set | None = None, cached: bool = False):
        self.fail = fail or {}
        self.hold = hold or set()
        self.cached = cached
        self.submitted: list[Job] = []
        self.held: list[Job] = []
        self.cancelled: list[Job] = []
        self._ids = itertools.count(1)

    def submit(self, kind, params, on_event=None, session_id=None, use_cache=True):
        full = jobs.normalize(kind, params)
        job = Job(next(self._ids), kind, full, on_event, session_id, use_cache)
        self.submitted.append(job)
        on_event(JobEvent(job.id, kind, "queued", {"ahead": 0}))
        if kind in self.hold:
            self.held.append(job)
        else:
            self.answer(job)
        return job

    def answer(self, job: Job) -> None:
        kind = job.kind
        if kind in self.fail:
            job.state = "error"
            job._done.set()
            job.on_event(JobEvent(job.id, kind, "error", {"message": self.fail[kind]}))
            return
        result = BUILDERS[kind](job.params)
        if kind == "rate_sweep":
            for point in result["points"]:
                job.on_event(JobEvent(job.id, kind, "step", {"kind": "rate_point", **point}))
        job.state, job.result = "done", result
        job._done.set()
        job.on_event(JobEvent(job.id, kind, "result", result, cached=self.cached,
                              device=DEVICE, measured_at=WHEN))

    def release(self, reverse: bool = False) -> None:
        held, self.held = self.held, []
        for job in reversed(held) if reverse else held:
            self.answer(job)

    def cancel(self, job):
        self.cancelled.append(job)
        job.state = "cancelled"
        job._done.set()
        return True

    def cancel_session(self, session_id):
        return 0

    def kinds(self) -> list[str]:
        return [j.kind for j in self.submitted]


def attach(page, service: StubService) -> StubService:
    """Give a page the stub in place of the real engine service."""
    page._jobs = SessionJobs(doc=None, service=service)
    return service
