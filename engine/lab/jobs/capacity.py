"""The `capacity_search` job: the most concurrent users the engine holds within two targets.

Closed-loop load, as the field names it: N users, each sending its next request as soon as its
last answer ends (the "fixed" workload), so N requests are always in the system. Each trial
serves `requests_per_user` x N requests of one seed; a load is tried `repeats` times with
different seeds, and engine.calc.capacity bisects on N (see there). A "step" event with each
load as it is judged, so the page can draw the search while it runs.
"""

from __future__ import annotations

import math

import numpy as np

from ...calc.capacity import Load, Targets, Trial, find_capacity
from ...serve.loop import run
from ...serve.metrics import tpot_ms, ttft_ms
from ...serve.workload import make_workload
from ..registry import Cancelled, Emit
from .engines import engine_from_params
from .serving import CONTINUOUS, scheduler_config, step_spread, workload_spec

CLOSED = {"kind": "fixed", "rate": float("inf"), "burstiness": 1.0, "long_prompt_len": 1,
          "long_at_s": 0.0}


class Stop(Exception):
    """The reader cancelled the search."""


def trial_of(result, users: int) -> Trial:
    """A load's figures from one run: P95 TTFT, 1000 / the median request's TPOT, the median
    queue wait and the preemptions."""
    done = [r for r in result.requests if r.finish_s is not None and r.token_s]
    tpots = [t for t in (tpot_ms(r) for r in done) if t]
    waits = [1000 * (r.admitted_s - r.arrival_s) for r in done]
    return Trial(users=users,
                 ttft_p95_ms=float(np.percentile([ttft_ms(r) for r in done], 95)),
                 per_user_tok_s=1000 / float(np.median(tpots)) if tpots else 0.0,
                 queue_ms=float(np.median(waits)) if waits else 0.0,
                 preemptions=result.metrics.preemptions)


def load_dict(load: Load, targets: Targets) -> dict:
    m = load.median
    return {"users": load.users, "met": targets.met(m), "ttft_p95_ms": m.ttft_p95_ms,
            "per_user_tok_s": m.per_user_tok_s, "queue_ms": m.queue_ms,
            "preemptions": m.preemptions,
            "trials": [{"ttft_p95_ms": t.ttft_p95_ms, "per_user_tok_s": t.per_user_tok_s,
                        "queue_ms": t.queue_ms, "preemptions": t.preemptions}
                       for t in load.trials]}


def capacity_search_job(params: dict, emit: Emit, cancelled: Cancelled) -> dict | None:
    config = scheduler_config(params, **CONTINUOUS)
    engine = engine_from_params(params)
    targets = Targets(params["ttft_p95_ms"], params["per_user_tok_s"])
    tries = [0]
    steps = []  # every trial's engine steps: the search's spread
    most = params["repeats"] * (2 * math.ceil(math.log2(params["max_users"])) + 1)  # at most

    def measure(users: int) -> Trial:
        if cancelled():
            raise Stop
        seed = params["seed"] + tries[0] % params["repeats"]  # each repeat its own requests
        tries[0] += 1
        spec = workload_spec({**params, "requests": users * params["requests_per_user"]},
                             **CLOSED, concurrency=users, seed=seed)
        result = run(engine, make_workload(spec, engine.tokenizer), config, cancelled=cancelled)
        if result.cancelled:
            raise Stop
        steps.extend(result.steps)
        emit("progress", {"done": tries[0], "total": max(tries[0], most),
                          "message": f"{users} users, trial {(tries[0] - 1) % params['repeats'] + 1}"
                                     f" of {params['repeats']}"})
        return trial_of(result, users)

    def judged(load: Load) -> None:
        emit("step", {"kind": "capacity_load", **load_dict(load, targets)})

    try:
        found = find_capacity(measure, targets, lo=1, hi=params["max_users"],
                              repeats=params["repeats"], progress=judged)
    except Stop:
        return None
    return {"device": engine.device, "preset": params["preset"],
            "weights": "random" if engine.config.random_weights else engine.model_config.weights,
            "max_batch": config.max_batch, "users": found.users,
            "first_failing_users": found.first_failing.users if found.first_failing else None,
            "cause": found.cause, "verdict": found.verdict(params["max_users"]),
            "trials_run": tries[0],
            "loads": [load_dict(load, targets) for load in found.loads],
            "spread": step_spread(steps)}
