"""`python -m engine bench-client`: load-test any OpenAI-compatible server from the client side
(engine/serve/bench_client.py) and print what `run` prints, measured at the client.

The workload flags are `run`'s, so the same flags and seed send the same requests; bad flags
exit with status 2 and one line, as everywhere. A server that cannot be reached, or does not
serve the model, is reported in one line before anything is measured.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from dataclasses import replace
from pathlib import Path

from ..config import WORKLOADS
from ..serve.bench_client import EndpointError, api_base, run_bench
from ..serve.bench_result import BenchResult, Load
from ..serve.conversation import Conversations, MultiTurnSpec
from ..serve.perfetto import write_trace
from ..serve.replay import MOONCAKE_BLOCK_TOKENS, load_trace, trace_requests
from ..serve.report import DEFAULT_PERCENTILES, percentile_key
from ..serve.saturation import Saturation, Slope, judge
from ..serve.workload import make_workload
from ..tokenizer import Tokenizer
from .common import UsageError, add_trace_out, emit_json, output_file
from .run import (
    add_workload_options,
    non_negative,
    positive,
    summary_table,
    whole,
    workload_from_args,
)

DURATION_REQUESTS = 4096  # the most requests --duration-s draws when no rate bounds them


def add_bench_client_parser(sub) -> None:
    """Register `bench-client` on the command line's subparsers."""
    p = sub.add_parser("bench-client", help="load-test an OpenAI-compatible server from the "
                                            "client side (the same JSON as run)")
    p.add_argument("--base-url", required=True,
                   help="the server, e.g. http://127.0.0.1:8000/v1 (/v1 is added if missing)")
    p.add_argument("--model", required=True, help="the model name the server serves")
    add_workload_options(p, rates=True, kinds=(*WORKLOADS, "multi-turn"))
    p.add_argument("--turns", type=whole("turns"), default=3,
                   help="multi-turn: turns per conversation; --requests counts conversations, "
                        "--rate their starts (default 3)")
    p.add_argument("--think-time-s", type=non_negative("think time (s)"), default=1.0,
                   help="multi-turn: seconds between an answer and the next turn (default 1)")
    p.add_argument("--timeout", type=positive("timeout (s)"), default=600.0,
                   help="stop after this many seconds; unfinished requests count as failed "
                        "(default 600)")
    add_trace_options(p)
    add_load_options(p)
    add_result_options(p)
    add_trace_out(p)
    p.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    p.set_defaults(func=cmd_bench_client, requests=None)


def add_trace_options(p) -> None:
    """Replaying a trace file instead of a drawn workload (engine.serve.replay)."""
    p.add_argument("--trace", type=Path, default=None, metavar="FILE",
                   help="replay a trace: JSON lines with timestamp (ms), input_length, "
                        "output_length and optional hash_ids, as Mooncake's traces; the "
                        "workload, rate and length flags are then not used")
    p.add_argument("--trace-block-tokens", type=whole("trace block tokens"),
                   default=MOONCAKE_BLOCK_TOKENS,
                   help=f"tokens a hash id stands for (default {MOONCAKE_BLOCK_TOKENS}, "
                        "Mooncake's)")
    p.add_argument("--trace-speed", type=positive("trace speed"), default=1.0,
                   help="replay this many times faster (default 1)")


def add_load_options(p) -> None:
    """How the requests are let out (engine.serve.bench_result.Load)."""
    p.add_argument("--max-concurrency", type=whole("max concurrency"), default=None,
                   help="most requests outstanding at once; one due while the cap is reached "
                        "waits, and its clock starts when it is sent (vLLM's option)")
    p.add_argument("--warmup-s", type=non_negative("warm-up (s)"), default=0.0,
                   help="requests sent in the first S seconds are warm-up: sent and listed, "
                        "left out of the metrics (default 0)")
    p.add_argument("--duration-s", type=positive("duration (s)"), default=None,
                   help="stop sending after S seconds (and wait for what was sent); without "
                        "--requests, enough requests are drawn to last")


def percentile_list(text: str) -> tuple[float, ...]:
    try:
        values = tuple(float(t) for t in text.split(",") if t.strip())
    except ValueError:
        values = ()
    if not values or not all(0 < q <= 100 for q in values):
        raise argparse.ArgumentTypeError(f"percentiles: give numbers in (0, 100] separated "
                                         f"by commas, like 50,90,99 (got {text!r})")
    return values


def add_result_options(p) -> None:
    """What the results hold: more SLOs, percentiles, repeats, vLLM's result file."""
    p.add_argument("--slo-itl-ms", type=positive("ITL SLO (ms)"), default=None,
                   help="a request meets it when every gap between its tokens is within it")
    p.add_argument("--slo-e2e-ms", type=positive("E2E SLO (ms)"), default=None)
    p.add_argument("--percentiles", type=percentile_list, default=DEFAULT_PERCENTILES,
                   help="percentiles for --result-json and the text, like 50,90,99 "
                        "(default 50,90,95,99)")
    p.add_argument("--repeats", type=whole("repeats"), default=1,
                   help="run the same workload this many times (default 1)")
    p.add_argument("--repeat-interval-s", type=non_negative("repeat interval (s)"),
                   default=5.0, help="seconds between repeats, for the server to settle "
                                     "(default 5)")
    p.add_argument("--result-json", type=output_file, default=None, metavar="FILE",
                   help="write the result in the key names of vllm bench serve "
                        "--save-result (ours added); with --repeats, one object a line")


def requests_for(args) -> int:
    """--requests, or with --duration-s alone enough arrivals to outlast it: half as many
    again as the highest rate asked for gives in that time, or DURATION_REQUESTS when no rate
    bounds them."""
    if args.requests is not None:
        return args.requests
    if args.duration_s is None:
        return 32
    rate = max(args.rate)
    if args.workload in ("poisson", "gamma") and math.isfinite(rate):
        expected = rate * (args.duration_s + args.ramp_up_s / 2)
        return min(DURATION_REQUESTS, math.ceil(1.5 * expected) + 16)
    return DURATION_REQUESTS


def one_run(args, base: str, rate: float) -> BenchResult:
    """One load test at this rate: the workload the flags describe, sent, with every SLO."""
    load = Load(args.max_concurrency, args.warmup_s, args.duration_s)
    load.validate()
    tokenizer = Tokenizer()
    follow_up = None
    if args.workload == "multi-turn":
        spec = MultiTurnSpec(args.requests, args.turns, args.think_time_s, rate,
                             args.prompt_len, args.output_len, args.seed)
        conversations = Conversations(spec, tokenizer)
        requests, follow_up = conversations.requests, conversations.follow_up
        workload = spec.to_json()
    elif args.trace is not None:
        requests = trace_requests(load_trace(args.trace), tokenizer, args.trace_block_tokens,
                                  args.trace_speed, args.seed)
        workload = {"kind": "trace", "file": args.trace.name, "requests": len(requests),
                    "block_tokens": args.trace_block_tokens, "speed": args.trace_speed,
                    "prompt_len": [min(len(r.prompt_ids) for r in requests),
                                   max(len(r.prompt_ids) for r in requests)],
                    "output_len": [min(r.output_len for r in requests),
                                   max(r.output_len for r in requests)]}
    else:
        spec = workload_from_args(argparse.Namespace(**{**vars(args), "rate": rate}))
        requests = make_workload(spec, tokenizer)
        workload = spec.to_json()
    if follow_up is not None:
        prompts = conversations.prompts
    else:
        prompts = [tokenizer.decode(r.prompt_ids) for r in requests]

    def progress(endpoint) -> None:
        if not args.json:
            print(f"sending {'up to ' if load.duration_s else ''}{len(requests)} requests to "
                  f"{base} ({args.model})...", file=sys.stderr, flush=True)

    result = run_bench(base, args.model, requests, prompts, args.timeout, args.slo_ttft_ms,
                       args.slo_tpot_ms, on_ready=progress, load=load, follow_up=follow_up)
    if follow_up is not None:
        for s in result.sent:
            s.tags = dict(zip(("conversation", "turn"), conversations.conversation(s.trace.id)))
    result = replace(result, slo_itl_ms=args.slo_itl_ms, slo_e2e_ms=args.slo_e2e_ms)
    result.extra["workload"] = workload
    return result


def cmd_bench_client(args) -> int:
    base = api_base(args.base_url)
    args.requests = requests_for(args)
    if len(args.rate) > 1:
        return rate_sweep(args, base)
    [rate] = args.rate
    runs: list[BenchResult] = []
    try:
        for k in range(args.repeats):
            if k:
                if not args.json:
                    print(f"waiting {args.repeat_interval_s:g} s before repeat {k + 1} of "
                          f"{args.repeats}...", file=sys.stderr, flush=True)
                time.sleep(args.repeat_interval_s)
            runs.append(one_run(args, base, rate))
    except EndpointError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    result = runs[-1]
    if args.trace_out is not None:
        write_trace(args.trace_out, result.to_json(), result.track_of())
    if args.result_json is not None:
        write_result_json(args.result_json, [r.vllm_result(rate, args.burstiness,
                                                           args.percentiles) for r in runs])
    if args.json:
        out = result.to_json()
        if len(runs) > 1:
            out["repeats"] = repeats_json(runs, args.repeat_interval_s)
        emit_json(out)
        return 0
    for k, run in enumerate(runs):
        if len(runs) > 1:
            print(f"\n--- repeat {k + 1} of {len(runs)} ---")
        print_run(args, base, run)
    if len(runs) > 1:
        print()
        print(spread_lines(repeats_json(runs, args.repeat_interval_s)))
    return 0


def rate_sweep(args, base: str) -> int:
    """One run a rate, in the order given, judged for over-saturation (serve/saturation.py);
    the sweep stops at the first over-saturated rate and says so."""
    if args.repeats > 1:
        raise UsageError("--repeats repeats one rate: give one --rate, or no --repeats")
    if args.workload not in ("poisson", "gamma", "multi-turn") or args.trace is not None:
        raise UsageError("a sweep of rates needs arrivals at a rate: the poisson, gamma or "
                         "multi-turn workload, no --trace")
    points, results, stopped = [], [], None
    try:
        for k, rate in enumerate(args.rate):
            if k:
                time.sleep(args.repeat_interval_s)
            result = one_run(args, base, rate)
            judged = judge(result.traces)
            results.append(result)
            points.append({"rate": "inf" if math.isinf(rate) else rate,
                           "metrics": {**result.metrics.to_json(), "failed": result.failed},
                           "slo": result.slo, "saturation": judged.to_json()})
            if not args.json:
                print(sweep_line(rate, result, judged), flush=True)
            if judged.over_saturated:
                stopped = rate
                break
    except EndpointError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    not_run = args.rate[len(points):]
    if args.trace_out is not None:
        write_trace(args.trace_out, results[-1].to_json(), results[-1].track_of())
    if args.result_json is not None:
        write_result_json(args.result_json, [
            r.vllm_result(rate, args.burstiness, args.percentiles) for r, rate in
            zip(results, args.rate)])
    message = None
    if stopped is not None:
        message = (f"over-saturated at {stopped:g} req/s: {judge_of(points[-1])}; stopped the "
                   f"sweep there" + (f", {len(not_run)} higher rates not run" if not_run
                                     else ""))
    if args.json:
        emit_json({"source": "client", "base_url": base, "model": args.model,
                   "workload": results[-1].extra["workload"], "sweep": points,
                   "over_saturated_at": stopped, "not_run": not_run, "message": message})
        return 0
    print(message or "no rate over-saturated the server")
    return 0


def judge_of(point: dict) -> str:
    s = point["saturation"]
    return Saturation(**{**s, "concurrency": Slope(**s["concurrency"]),
                         "ttft": Slope(**s["ttft"])}).reason()


def sweep_line(rate: float, result: BenchResult, judged: Saturation) -> str:
    m = result.metrics
    p50 = m.ttft_ms.p50
    return (f"rate {rate:g}/s: {m.completed} completed, {m.requests_per_s or 0:.2f} req/s "
            f"over the run, TTFT p50 {'n/a' if p50 is None else f'{p50:.0f}'} ms, "
            f"{m.throughput_tok_s or 0:.0f} tokens/s"
            + (" - over-saturated" if judged.over_saturated else ""))


def print_run(args, base: str, result: BenchResult) -> None:
    spec, load = result.extra["workload"], result.load
    shape = (f"{spec['lengths']} lengths" if spec.get("lengths") else
             f"prompts up to {spec['prompt_len'][1]} tokens, outputs up to "
             f"{spec['output_len'][1]}")
    title = (f"client-side, {spec['kind']} workload, {len(result.sent)} requests sent "
             f"({shape}) - {args.model} at {base}")
    print(summary_table(result.metrics, title))
    print(f"failed {result.failed}" + (" (stopped by --timeout)" if result.cancelled else ""))
    if result.slo is not None:
        print(slo_line(result.slo))
    if tuple(args.percentiles) != DEFAULT_PERCENTILES:
        print(percentile_line(result.vllm_result(0.0, 1.0, args.percentiles), args.percentiles))
    if result.warmup_requests:
        print(f"warm-up: {result.warmup_requests} requests sent in the first "
              f"{load.warmup_s:g} s, left out of the metrics above")
    if load.duration_s is not None and len(result.sent) == spec["requests"]:
        print(f"every one of the {spec['requests']} requests was sent before --duration-s "
              f"{load.duration_s:g} s ended: raise --requests for a full-length test")
    print(gap_lines(result.comparison))


def slo_line(slo: dict) -> str:
    """Attainment of each SLO, of all, and goodput in requests and tokens."""
    def pct(x):
        return "n/a" if x is None else f"{100 * x:.0f}%"
    each = ", ".join(f"{k.upper()} <= {slo['limits_ms'][k]:g} ms {pct(v)}"
                     for k, v in slo["attainment"].items())
    rps, tok = slo["goodput_rps"], slo["goodput_tok_s"]
    return (f"SLO attainment: {each}; all {pct(slo['attainment_all'])} "
            f"({slo['requests_meeting_slo']}/{slo['completed']}); goodput "
            f"{'n/a' if rps is None else f'{rps:.2f}'} req/s, "
            f"{'n/a' if tok is None else f'{tok:.1f}'} good tokens/s")


def percentile_line(vllm: dict, percentiles) -> str:
    rows = []
    for name, label in (("ttft", "TTFT"), ("tpot", "TPOT"), ("itl", "ITL"), ("e2el", "E2E")):
        values = [vllm[f"{percentile_key(q)}_{name}_ms"] for q in percentiles]
        rows.append(f"{label} " + " ".join("n/a" if v is None else f"{v:.1f}" for v in values))
    heads = " ".join(percentile_key(q) for q in percentiles)
    return f"percentiles ({heads}), ms: " + "; ".join(rows)


REPEATED = (("ttft_p50_ms", ("ttft_ms", "p50")), ("tpot_p50_ms", ("tpot_ms", "p50")),
            ("e2e_p50_ms", ("e2e_ms", "p50")), ("throughput_tok_s", ("throughput_tok_s",)),
            ("requests_per_s", ("requests_per_s",)), ("goodput_rps", ("goodput_rps",)))


def repeats_json(runs: list[BenchResult], interval_s: float) -> dict:
    """Each repeat's headline figures, and their mean, min and max over the repeats."""
    def pick(metrics: dict, path):
        for key in path:
            metrics = metrics[key] if metrics is not None else None
        return metrics

    each = [{name: pick(r.metrics.to_json(), path) for name, path in REPEATED}
            | {"completed": r.metrics.completed, "failed": r.failed} for r in runs]
    spread = {}
    for name, _ in REPEATED:
        values = [e[name] for e in each if e[name] is not None]
        spread[name] = ({"mean": sum(values) / len(values), "min": min(values),
                         "max": max(values)} if values else None)
    return {"count": len(runs), "interval_s": interval_s, "runs": each, "spread": spread}


def spread_lines(repeats: dict) -> str:
    rows = [f"over {repeats['count']} repeats ({repeats['interval_s']:g} s apart): "
            "mean [min, max]"]
    for name, s in repeats["spread"].items():
        if s is not None:
            rows.append(f"  {name:<17} {s['mean']:.2f} [{s['min']:.2f}, {s['max']:.2f}]")
    return "\n".join(rows)


def write_result_json(path, results: list[dict]) -> None:
    """`vllm bench serve --save-result`'s file: one JSON object; with repeats, one a line, as
    its --append-result writes them."""
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(json.dumps(r) for r in results) + "\n")


def gap_lines(comparison: dict | None) -> str:
    """How the client's view differs from the engine's own trace, when the server has one."""
    if comparison is None:
        return "engine trace: not available from this server (only ours serves /v1/engine/trace)"
    ttft, e2e = comparison["ttft_gap_ms"], comparison["e2e_gap_ms"]
    if not comparison["requests_matched"]:
        return "engine trace: no request matched"
    engine_ttft = comparison["metrics"]["ttft_ms"]
    return (f"engine's own TTFT p50 {engine_ttft['p50']:.1f} ms; outside the engine (network, "
            f"HTTP, queueing): TTFT +{ttft['p50']:.1f} ms p50, +{ttft['max']:.1f} ms max; E2E "
            f"+{e2e['p50']:.1f} ms p50 ({comparison['requests_matched']} requests matched)")
