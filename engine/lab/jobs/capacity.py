"""The `capacity_search` job: the most concurrent users the engine holds within two targets.

Closed-loop load, as the field names it: N users, each sending its next request as soon as its
last answer ends (the "fixed" workload), so N requests are always in the system. Each trial
serves `requests_per_user` x N requests of its own seed; engine.calc.capacity searches the grid
of loads (`per_doubling` a doubling), trying a load again while its intervals straddle a target
(up to `repeats` trials). A trial that the disturbance check (engine.lab.quality: other work
kept the engine off its core) finds disturbed is run again once, so one hiccup on a shared
machine does not move a load across a target. A "step" event with each load as it is judged,
so the page can draw the search while it runs.
"""

from __future__ import annotations

import math

from ...calc.capacity import Load, Trial, find_capacity, grid
from ...calc.slo_math import Targets
from ...serve.loop import run
from ...serve.metrics import tpot_ms, ttft_ms
from ...serve.workload import make_workload
from .. import cores, quality
from ..control import Control
from ..registry import Emit
from .engines import engine_from_params
from .serving import CONTINUOUS, scheduler_config, step_spread, workload_spec

CLOSED = {"kind": "fixed", "rate": float("inf"), "burstiness": 1.0, "long_prompt_len": 1,
          "long_at_s": 0.0}
RERUNS = 1  # a disturbed trial is run again this many times at most (the last run is kept)


class Stop(Exception):
    """The reader cancelled the search."""


def trial_of(result, users: int) -> Trial:
    """A trial's samples from one run: every finished request's TTFT, TPOT and queue wait (ms),
    and the run's preemptions."""
    done = [r for r in result.requests if r.finish_s is not None and r.token_s]
    return Trial(users=users, ttft_ms=tuple(ttft_ms(r) for r in done),
                 tpot_ms=tuple(t for t in (tpot_ms(r) for r in done) if t),
                 queue_ms=tuple(1000 * (r.admitted_s - r.arrival_s) for r in done),
                 preemptions=result.metrics.preemptions)


def load_dict(load: Load, targets: Targets) -> dict:
    """A judged load as its record (engine.lab.results.CapacityLoad): the pooled figures with
    their intervals and counts, and each trial's own."""
    lo, hi = load.per_user_interval
    return {"users": load.users, "met": load.met(targets), "ttft_p95_ms": load.ttft.value,
            "ttft_ci_lo": load.ttft.lo, "ttft_ci_hi": load.ttft.hi, "requests": load.ttft.n,
            "ttft_bounded": load.ttft.bounded, "per_user_tok_s": load.per_user_tok_s,
            "per_user_ci_lo": lo, "per_user_ci_hi": hi, "queue_ms": load.queue_ms,
            "preemptions": load.preemptions,
            "trials": [{"ttft_p95_ms": t.ttft_p95_ms, "per_user_tok_s": t.per_user_tok_s,
                        "queue_ms": t.median_queue_ms, "preemptions": t.preemptions,
                        "requests": len(t.ttft_ms)}
                       for t in load.trials]}


def capacity_search_job(params: dict, emit: Emit, control: Control) -> dict | None:
    config = scheduler_config(params, **CONTINUOUS)
    engine = engine_from_params(params)
    targets = Targets.per_user(params["ttft_p95_ms"], params["per_user_tok_s"])
    tries, reruns = [0], [0]
    steps = []  # every trial's engine steps: the search's spread
    loads = grid(1, params["max_users"], params["per_doubling"])
    most = params["repeats"] * (2 * math.ceil(math.log2(len(loads))) + 2)  # about, at most

    def serve(users: int):
        seed = params["seed"] + tries[0]  # every trial its own requests
        tries[0] += 1
        spec = workload_spec({**params, "requests": users * params["requests_per_user"]},
                             **CLOSED, concurrency=users, seed=seed)
        before = quality.Usage.now(cores.available_cores())
        result = run(engine, make_workload(spec, engine.tokenizer), config, cancelled=control)
        check = quality.check(before, quality.Usage.now(before.cores))
        if result.cancelled:
            raise Stop
        return result, check["disturbed"]

    def measure(users: int) -> Trial:
        if control.cancelled():
            raise Stop
        result, disturbed = serve(users)
        for _ in range(RERUNS):
            if not disturbed:
                break
            reruns[0] += 1
            emit("progress", {"done": tries[0], "total": max(tries[0], most),
                              "message": f"{users} users: a disturbed run, measured again"})
            result, disturbed = serve(users)
        steps.extend(result.steps)
        emit("progress", {"done": tries[0], "total": max(tries[0], most),
                          "message": f"{users} users, run {tries[0]}"})
        return trial_of(result, users)

    def judged(load: Load) -> None:
        emit("step", {"kind": "capacity_load", **load_dict(load, targets)})

    try:
        found = find_capacity(measure, targets, lo=1, hi=params["max_users"],
                              repeats=params["repeats"], per_doubling=params["per_doubling"],
                              progress=judged)
    except Stop:
        return None
    return {"device": engine.device, "preset": params["preset"],
            "weights": "random" if engine.config.random_weights else engine.model_config.weights,
            "max_batch": config.max_batch, "users": found.users,
            "first_failing_users": found.first_failing.users if found.first_failing else None,
            "cause": found.cause, "verdict": found.verdict(params["max_users"]),
            "trials_run": tries[0], "disturbed_reruns": reruns[0], "grid": loads,
            "loads": [load_dict(load, targets) for load in found.loads],
            "spread": step_spread(steps)}
