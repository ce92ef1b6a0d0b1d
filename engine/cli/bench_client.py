"""`python -m engine bench-client`: load-test any OpenAI-compatible server from the client side
(engine/serve/bench_client.py) and print what `run` prints, measured at the client.

The workload flags are `run`'s, so the same flags and seed send the same requests; bad flags
exit with status 2 and one line, as everywhere. A server that cannot be reached, or does not
serve the model, is reported in one line before anything is measured.
"""

from __future__ import annotations

import math
import sys

from ..serve.bench_client import EndpointError, Load, api_base, run_bench
from ..serve.perfetto import write_trace
from ..serve.workload import make_workload
from ..tokenizer import Tokenizer
from .common import add_trace_out, emit_json
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
    add_workload_options(p)
    p.add_argument("--timeout", type=positive("timeout (s)"), default=600.0,
                   help="stop after this many seconds; unfinished requests count as failed "
                        "(default 600)")
    add_load_options(p)
    add_trace_out(p)
    p.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    p.set_defaults(func=cmd_bench_client, requests=None)


def add_load_options(p) -> None:
    """How the requests are let out (engine.serve.bench_client.Load)."""
    p.add_argument("--max-concurrency", type=whole("max concurrency"), default=None,
                   help="most requests outstanding at once; one due while the cap is reached "
                        "waits, and its clock starts when it is sent (vLLM's option)")
    p.add_argument("--warmup-s", type=non_negative("warm-up (s)"), default=0.0,
                   help="requests sent in the first S seconds are warm-up: sent and listed, "
                        "left out of the metrics (default 0)")
    p.add_argument("--duration-s", type=positive("duration (s)"), default=None,
                   help="stop sending after S seconds (and wait for what was sent); without "
                        "--requests, enough requests are drawn to last")


def requests_for(args) -> int:
    """--requests, or with --duration-s alone enough arrivals to outlast it: half as many
    again as the rate gives in that time, or DURATION_REQUESTS when no rate bounds them."""
    if args.requests is not None:
        return args.requests
    if args.duration_s is None:
        return 32
    if args.workload in ("poisson", "gamma") and math.isfinite(args.rate):
        expected = args.rate * (args.duration_s + args.ramp_up_s / 2)
        return min(DURATION_REQUESTS, math.ceil(1.5 * expected) + 16)
    return DURATION_REQUESTS


def cmd_bench_client(args) -> int:
    base = api_base(args.base_url)
    args.requests = requests_for(args)
    spec = workload_from_args(args)
    load = Load(args.max_concurrency, args.warmup_s, args.duration_s)
    load.validate()
    tokenizer = Tokenizer()
    requests = make_workload(spec, tokenizer)
    prompts = [tokenizer.decode(r.prompt_ids) for r in requests]
    def progress(endpoint) -> None:
        if not args.json:
            print(f"sending {len(requests)} requests to {base} ({args.model})...",
                  file=sys.stderr, flush=True)

    try:
        result = run_bench(base, args.model, requests, prompts, args.timeout,
                           args.slo_ttft_ms, args.slo_tpot_ms, on_ready=progress, load=load)
    except EndpointError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    result.extra["workload"] = spec.to_json()
    if args.trace_out is not None:
        write_trace(args.trace_out, result.to_json(), result.track_of())
    if args.json:
        emit_json(result.to_json())
        return 0
    title = (f"client-side, {spec.kind} workload, {spec.requests} requests (prompts up to "
             f"{spec.longest_prompt} tokens, outputs up to {spec.output_len[1]}) - "
             f"{args.model} at {base}")
    print(summary_table(result.metrics, title))
    print(f"failed {result.failed}" + (" (stopped by --timeout)" if result.cancelled else ""))
    if result.warmup_requests:
        print(f"warm-up: {result.warmup_requests} requests sent in the first "
              f"{load.warmup_s:g} s, left out of the metrics above")
    if load.duration_s is not None and len(result.sent) == len(requests):
        print(f"every one of the {len(requests)} requests was sent before --duration-s "
              f"{load.duration_s:g} s ended: raise --requests for a full-length test")
    print(gap_lines(result.comparison))
    return 0


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
