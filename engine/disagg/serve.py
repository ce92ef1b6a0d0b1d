"""A disaggregated run as the `run` command gives it: live (two worker processes, each on cores
of its own) where this process may run on two cores or more, else computed from costs measured on
one engine (the replay); the result is a RunResult (DESIGN.md's run shape) whose
`disaggregation` object says which it was, with every request's handover.
"""

from __future__ import annotations

import statistics

from ..calc.disagg_replay import ReplayRequest, replay
from ..config import EngineConfig, get_preset
from ..device import resolve_device
from ..errors import ConfigError
from ..lab.cores import available_cores
from ..scheduler import SchedulerConfig
from ..serve.loop import RunResult
from ..serve.metrics import compute_metrics
from ..serve.trace import RequestTrace
from ..serve.workload import Request
from .live import check_requests, run_live, split_cores

MODES = ("auto", "live", "replay")
LIVE_LABEL = "measured live: a prefill worker and a decode worker, each on cores of its own"
REPLAY_LABEL = ("computed from measured step costs (replay): each worker's step costs and the handover were "
                "measured on one engine here, and the workload's arrivals replayed on two "
                "simulated workers (fewer than two cores for the engine: two live workers would "
                "share one)")
BATCHES = (1, 2, 4, 8, 16, 32, 64)


def choose_mode(setting: str, cores: tuple[int, ...]) -> str:
    """live or replay: auto is live where the cores split into two workers' own."""
    if setting not in MODES:
        raise ConfigError(f"unknown disaggregation mode {setting!r}: choose one of "
                          f"{', '.join(MODES)}")
    if setting == "live" and split_cores(cores) is None:
        raise ConfigError(f"a live disaggregated run needs two cores, one a worker; this "
                          f"process may run on {len(cores)}: use --disagg-mode replay")
    if setting == "auto":
        return "live" if split_cores(cores) is not None else "replay"
    return setting


def check(requests: list[Request], config: SchedulerConfig) -> None:
    """What a disaggregated run serves: timed arrivals, greedy, continuous decode batching."""
    if config.policy != "continuous":
        raise ConfigError("a disaggregated run batches its decode worker continuously: use "
                          "--policy continuous")
    check_requests(requests)


def profile_points(requests: list[Request], max_batch: int) -> tuple[list[int], list[int], int]:
    """Where to measure: five prompt lengths from the shortest to the longest of the workload,
    the batch sizes the decode worker can reach (powers of two up to the smaller of its limit
    and the number of requests, and that number), and the decode context (the median prompt
    plus half the median output)."""
    lengths = sorted(len(r.prompt_ids) for r in requests)
    lo, hi = lengths[0], lengths[-1]
    prompts = sorted({round(lo + (hi - lo) * i / 4) for i in range(5)})
    top = min(max_batch, len(requests))
    batches = sorted({b for b in BATCHES if b < top} | {top})
    context = int(statistics.median(lengths)
                  + statistics.median(r.output_len for r in requests) / 2)
    return prompts, batches, context


def run_disaggregated(config: EngineConfig, requests: list[Request], sched: SchedulerConfig,
                      mode: str = "auto", slo_ttft_ms: float | None = None,
                      slo_tpot_ms: float | None = None, engine=None, rounds: int = 3,
                      cores: tuple[int, ...] | None = None) -> RunResult:
    """Serve requests disaggregated, live or replayed (choose_mode); `engine` (replay only) is
    the engine to measure the costs on, built from config when not given."""
    check(requests, sched)
    cores = available_cores() if cores is None else cores
    mode = choose_mode(mode, cores)
    extra: dict = {"mode": mode}
    if mode == "live":
        live = run_live(config, requests, sched.max_batch, split_cores(cores))
        traces, steps = live.requests, live.steps
        extra.update(label=LIVE_LABEL, workers=live.workers,
                     handover_ms=[live.handover_ms.get(r.id) for r in requests],
                     export_ms=[live.export_ms.get(r.id) for r in requests],
                     kv_bytes=[live.kv_bytes.get(r.id) for r in requests])
        device = resolve_device(config.device)
    else:
        from ..llm_engine import LLMEngine
        from .costs import measure_costs

        engine = engine or LLMEngine(config)
        prompts, batches, context = profile_points(requests, sched.max_batch)
        measured = measure_costs(engine, prompts, batches, context, rounds)
        replayed = replay([ReplayRequest(r.id, r.arrival_s, len(r.prompt_ids), r.output_len)
                           for r in requests], measured.costs, sched.max_batch)
        traces = [_trace(r, d) for r, d in zip(requests, replayed)]
        steps = []
        extra.update(label=REPLAY_LABEL, measured=measured.to_json(),
                     handover_ms=[1000 * d.handover_s for d in replayed],
                     export_ms=[1000 * (d.sent_s - d.first_token_s) for d in replayed],
                     decode_context=context)
        device = engine.device
    preset = get_preset(config.preset)
    return RunResult(
        device=device, preset=preset.name,
        weights="random" if config.random_weights else preset.weights, config=sched,
        requests=traces, steps=steps,
        metrics=compute_metrics(traces, None, None, slo_ttft_ms, slo_tpot_ms),
        extra={"disaggregation": extra})


def _trace(r: Request, d) -> RequestTrace:
    trace = RequestTrace(r.id, r.arrival_s, len(r.prompt_ids), len(d.token_s))
    trace.admitted_s, trace.first_token_s = d.prefill_start_s, d.first_token_s
    trace.token_s, trace.finish_s = list(d.token_s), d.token_s[-1]
    return trace
