"""`python -m engine run`: serve a seeded workload under a batching policy, print its metrics.

Every value is checked before anything runs; a bad one exits with status 2 and one line naming
the limit (argparse types for the flags, ConfigError for what needs the engine: context, KV
budget). --json prints exactly one JSON object on stdout: the DESIGN.md `run` shape, plus the
workload, the scheduler settings, per-request preemptions and per-step batch and KV use.
"""

from __future__ import annotations

import argparse

from ..config import get_preset
from ..errors import ConfigError
from ..lab.params import Float, Int, Lengths, Rate
from ..scheduler import DEFAULT_CHUNK_SIZE, DEFAULT_TOKEN_BUDGET, POLICIES, SchedulerConfig
from ..serve.lengths import available as available_lengths
from ..serve.loop import run
from ..serve.metrics import Metrics
from ..serve.perfetto import write_trace
from ..serve.phases import mean_phases_ms
from ..serve.workload import WORKLOADS, WorkloadSpec, make_workload
from ..speculative import SpeculativeDecoder, make_draft
from ..traffic_mix import BATCH, FLOOD_TENANT, INTERACTIVE, MixSpec, make_mix
from .common import (
    add_speculative_options,
    add_trace_out,
    arg_type,
    emit_json,
    kv_format,
    make_engine,
    weight_format,
)
from .disaggregate import add_disaggregate_options, cmd_run_disaggregated
from .traffic_options import MIX, add_traffic_options, class_table, mix_from_args, traffic_from_args


# ---- argument types: the checks job parameters get (engine.lab.params), on a flag's text ------
def whole(what: str, minimum: int = 1):
    return arg_type(Int(lo=minimum), what)


def positive(what: str):
    return arg_type(Float(lo=0.0, above=True), what)


def non_negative(what: str):
    return arg_type(Float(lo=0.0), what)


def length_range(what: str):
    """A[:B]: one length, or a uniform range of whole numbers with 1 <= A <= B."""
    return arg_type(Lengths(single=True), what)


rate = arg_type(Rate(), "rate")  # requests per second, or inf (everything arrives at t = 0)


def rate_list(text: str) -> list[float]:
    """R or R1,R2,...: rates in arrivals per second (each > 0, or inf)."""
    items = [t.strip() for t in text.split(",") if t.strip()]
    if not items:
        raise argparse.ArgumentTypeError("rate: give a rate or a comma-separated list, like "
                                         "1,2,4")
    return [rate(t) for t in items]


def add_workload_options(p, rates: bool = False, kinds: tuple[str, ...] = WORKLOADS) -> None:
    """The workload's flags (and the SLOs goodput is judged by), shared by `run` and
    `bench-client`, so one seed gives the same requests to the engine and over HTTP. rates:
    --rate takes a list (bench-client's sweep), always parsed to a list. kinds: the workloads
    offered (bench-client adds multi-turn)."""
    p.add_argument("--workload", default="poisson", choices=kinds)
    if rates:
        p.add_argument("--rate", type=rate_list, default=[10.0],
                       help="arrivals per second, or inf: all at t=0 (poisson, gamma; default "
                            "10); a list 1,2,4,... sweeps the rates and stops at the first the "
                            "server cannot keep up with")
    else:
        p.add_argument("--rate", type=rate, default=10.0,
                       help="arrivals per second, or inf: all at t=0 (poisson, gamma; default "
                            "10)")
    p.add_argument("--burstiness", type=positive("burstiness"), default=1.0,
                   help="gamma shape K: gaps with coefficient of variation 1/sqrt(K); K other "
                        "than 1 makes poisson arrivals gamma ones, as vLLM's (default 1)")
    p.add_argument("--ramp-up-s", type=non_negative("ramp-up (s)"), default=0.0,
                   help="the rate climbs linearly from 0 to --rate over this many seconds "
                        "(poisson, gamma; default 0)")
    p.add_argument("--requests", type=whole("requests"), default=32,
                   help="requests to serve (interference: plus the long prompt; default 32)")
    p.add_argument("--concurrency", type=whole("concurrency"), default=4,
                   help="users in the closed loop (fixed)")
    p.add_argument("--prompt-len", type=length_range("prompt length"), default=(32, 256),
                   help="prompt tokens, A or uniform A:B (default 32:256)")
    p.add_argument("--output-len", type=length_range("output length"), default=(16, 128),
                   help="output tokens, forced, A or uniform A:B (default 16:128)")
    p.add_argument("--lengths", default=None, metavar="NAME",
                   help="draw prompt and output lengths from a bundled distribution instead "
                        f"of --prompt-len and --output-len: {', '.join(available_lengths())}")
    p.add_argument("--long-prompt-len", type=whole("long prompt length"), default=1536,
                   help="the late long prompt's tokens (interference; default 1536)")
    p.add_argument("--long-at", type=non_negative("long-at"), default=0.2,
                   help="when the long prompt arrives, seconds (interference; default 0.2)")
    p.add_argument("--slo-ttft-ms", type=positive("TTFT SLO (ms)"), default=None)
    p.add_argument("--slo-tpot-ms", type=positive("TPOT SLO (ms)"), default=None)
    p.add_argument("--seed", type=whole("seed", 0), default=0,
                   help="the same seed gives the same workload under every policy")
    p.add_argument("--shared-prefix-len", type=whole("shared prefix length", 0), default=0,
                   help="tokens every prompt starts with, before its own --prompt-len tokens "
                        "(a shared system prompt; default 0)")


def add_batch_options(p, chunk_note: str = "") -> None:
    """--max-batch and --chunk-size, for `run` and `serve`."""
    p.add_argument("--max-batch", type=whole("max batch"), default=8,
                   help="most requests running at once (default 8)")
    p.add_argument("--chunk-size", type=whole("chunk size", 0), default=DEFAULT_CHUNK_SIZE,
                   help=f"{chunk_note}prefill chunk tokens; 0 prefills whole prompts "
                        f"(default {DEFAULT_CHUNK_SIZE})")


def add_run_parser(sub, add_engine_options) -> None:
    """Register `run` on the command line's subparsers."""
    p = sub.add_parser("run", help="serve a workload under a batching policy: trace and metrics")
    p.add_argument("--policy", required=True, choices=POLICIES)
    add_workload_options(p, kinds=WORKLOADS + (MIX,))
    add_batch_options(p, "continuous: ")
    p.add_argument("--timeout-ms", type=non_negative("timeout"), default=50.0,
                   help="dynamic: launch when the oldest request waited this long (default 50)")
    p.add_argument("--max-tokens-per-step", type=whole("max tokens per step"), default=None,
                   help=f"continuous: token budget of a step (default {DEFAULT_TOKEN_BUDGET}; "
                        "no limit with --chunk-size 0)")
    p.add_argument("--prefix-cache", choices=("on", "off"), default="off",
                   help="keep full KV blocks by their prefix and reuse them (default off)")
    add_traffic_options(p)
    add_speculative_options(p)
    add_disaggregate_options(p)
    add_trace_out(p)
    add_engine_options(p)
    p.set_defaults(func=cmd_run)


def workload_from_args(args) -> WorkloadSpec:
    """The workload the flags describe, checked."""
    kind = args.workload
    if kind == "poisson" and args.burstiness != 1.0:  # vLLM's --burstiness: gamma gaps
        kind = "gamma"
    spec = WorkloadSpec(
        kind=kind, requests=args.requests, rate=args.rate, burstiness=args.burstiness,
        concurrency=args.concurrency, prompt_len=args.prompt_len, output_len=args.output_len,
        long_prompt_len=args.long_prompt_len, long_at_s=args.long_at, seed=args.seed,
        shared_prefix_len=args.shared_prefix_len, ramp_up_s=args.ramp_up_s,
        lengths=args.lengths,
    )
    spec.validate()
    return spec


def specs_from_args(args) -> tuple[WorkloadSpec, SchedulerConfig]:
    """The workload and scheduler settings, checked against each other and the preset's context
    (the checks that need no engine)."""
    spec = mix_from_args(args) if args.workload == MIX else workload_from_args(args)
    config = SchedulerConfig(
        policy=args.policy, max_batch=args.max_batch, timeout_ms=args.timeout_ms,
        chunk_size=args.chunk_size, max_tokens_per_step=args.max_tokens_per_step,
        traffic=traffic_from_args(args),
    )
    config.validate()
    cfg = get_preset(args.preset)
    if args.workload == MIX:
        if spec.longest > cfg.context:
            raise ConfigError(f"the mix's longest request ({spec.longest} tokens) exceeds the "
                              f"{cfg.name} context of {cfg.context} positions")
        if config.traffic is not None and not {INTERACTIVE, BATCH} <= set(config.traffic.names):
            raise ConfigError(f"the mix tags its requests {INTERACTIVE!r} and {BATCH!r}: "
                              f"--classes must name both")
        return spec, config
    prompt, output = spec.longest_prompt, spec.longest_output
    if prompt + output > cfg.context:
        raise ConfigError(
            f"prompts of up to {prompt} tokens plus up to {output} new tokens "
            f"exceed the {cfg.name} context of {cfg.context} positions")
    return spec, config


def cmd_run(args) -> int:

    spec, config = specs_from_args(args)
    if args.disaggregate:
        return cmd_run_disaggregated(args, spec, config)
    engine = make_engine(args)
    if args.workload == MIX:
        requests = make_mix(spec, engine.tokenizer)
    else:
        requests = make_workload(spec, engine.tokenizer)
    speculative = None
    if args.speculative != "off":
        speculative = SpeculativeDecoder(engine, make_draft(args.speculative, engine),
                                         args.spec_k)
    result = run(engine, requests, config, slo_ttft_ms=args.slo_ttft_ms,
                 slo_tpot_ms=args.slo_tpot_ms, speculative=speculative)
    result.extra["workload"] = spec.to_json()
    result.extra.update(weight_format(engine))
    result.extra.update(kv_format(engine))
    if speculative is not None:
        result.extra["speculative"] = {"method": args.speculative,
                                       **result.extra["speculative"]}
    if args.trace_out is not None:
        write_trace(args.trace_out, result.to_json())
    if args.json:
        emit_json({**result.to_json(),
                   "phases_mean_ms": mean_phases_ms(result.phases().values())})
        return 0
    print(summary_table(result.metrics, describe(args, spec, engine)))
    if args.workload == MIX or config.traffic is not None:
        print("\n" + class_table(result.to_json()["requests"]))
    print(phases_line(mean_phases_ms(result.phases().values())))
    if "prefix_cache" in result.extra:
        print(prefix_cache_line(result.extra["prefix_cache"]))
    if speculative is not None:
        print(speculative_line(result.extra["speculative"]))
    return 0


def phases_line(mean_ms: dict[str, float] | None) -> str:
    """The mean request's time by phase (engine.serve.phases), in ms."""
    if mean_ms is None:
        return "phases: n/a (no request finished)"
    parts = ", ".join(f"{name} {mean_ms[name]:.2f}" for name in
                      ("tokenize", "queue", "prefill", "decode", "detokenize", "other"))
    return f"phases of the mean request, ms: {parts} (E2E {mean_ms['e2e']:.1f})"


def speculative_line(stats: dict) -> str:
    rate = stats["acceptance_rate"]
    rate = "n/a" if rate is None else f"{100 * rate:.0f}%"
    return (f"speculative {stats['method']}, k={stats['k']}: {stats['steps']} verify steps, "
            f"{stats['tokens_per_step'] or 0:.2f} tokens per sequence a step, {rate} of "
            f"{stats['proposed']} draft tokens accepted")


def prefix_cache_line(stats: dict) -> str:
    rate = stats["token_hit_rate"]
    rate = "n/a" if rate is None else f"{100 * rate:.0f}%"
    return (f"prefix cache: {stats['hits']}/{stats['lookups']} admissions hit, "
            f"{stats['tokens_skipped']} prompt tokens skipped ({rate}), "
            f"{stats['blocks_shared']} blocks shared, {stats['evictions']} evictions")


def describe(args, spec: WorkloadSpec, engine) -> str:
    weights = "trained" if engine.model_config.weights == "trained" else \
        "random weights: timing only"
    if isinstance(spec, MixSpec):
        lanes = "one FIFO queue" if args.classes is None else \
            f"classes {args.classes} ({args.class_order})"
        flood = f", {spec.flood_requests} from {FLOOD_TENANT!r} at {spec.flood_rate:g}/s" \
            if spec.flood_requests else ""
        weights += ", int8 weights" if weight_format(engine) else ""
        return (f"{args.policy} batching (max batch {args.max_batch}), {lanes} - mix workload: "
                f"{spec.chat_requests} chat requests at {spec.chat_rate:g}/s, a batch job of "
                f"{spec.batch_requests}{flood} - {engine.model_config.name} ({weights}) on "
                f"{engine.device}")
    what = {"poisson": f"rate {args.rate:g}/s", "gamma": f"rate {args.rate:g}/s, "
            f"burstiness {spec.burstiness:g}", "fixed": f"concurrency {spec.concurrency}",
            "interference": f"+ {spec.long_prompt_len}-token prompt at {spec.long_at_s:g} s"}
    shared = f", {spec.shared_prefix_len}-token shared prefix" if spec.shared_prefix_len else ""
    cache = ", prefix cache on" if engine.blocks.prefix_caching else ""
    if args.speculative != "off":
        cache += f", speculative {args.speculative} k={args.spec_k}"
    if weight_format(engine):
        weights += ", int8 weights"
    if kv_format(engine):
        weights += ", fp8 KV"
    return (f"{args.policy} batching (max batch {args.max_batch}{cache}) - {spec.kind} "
            f"workload, {spec.requests} requests, {what[spec.kind]}{shared} - "
            f"{engine.model_config.name} ({weights}) on {engine.device}")


def _fmt(value: float | None, digits: int = 1) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def summary_table(m: Metrics, title: str) -> str:
    rows = [title, "", f"{'ms':<7}" + "".join(f"{h:>9}" for h in
                                             ("mean", "p50", "p90", "p95", "p99", "max"))]
    for name, s in (("TTFT", m.ttft_ms), ("TPOT", m.tpot_ms), ("ITL", m.itl_ms),
                    ("E2E", m.e2e_ms), ("queue", m.queue_ms)):
        rows.append(f"{name:<7}" + "".join(f"{_fmt(v):>9}" for v in
                                           (s.mean, s.p50, s.p90, s.p95, s.p99, s.max)))
    goodput = "n/a (no SLO given)" if m.goodput_rps is None else \
        f"{m.goodput_rps:.2f} req/s ({m.requests_meeting_slo}/{m.completed} met the SLO)"
    slots = "n/a" if m.slot_use is None else f"{100 * m.slot_use:.0f}%"
    rows += [
        "",
        f"throughput {_fmt(m.throughput_tok_s)} output tokens/s, {_fmt(m.requests_per_s, 2)} "
        f"requests/s over {_fmt(m.duration_s, 2)} s ({m.completed} requests, "
        f"{m.output_tokens} tokens)",
        f"goodput {goodput}; batch slots used {slots}; preemptions {m.preemptions}",
    ]
    return "\n".join(rows)
