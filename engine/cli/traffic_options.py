"""`run`'s and `serve`'s traffic options: --classes, --class-order and --over-quota
(engine/traffic.py); `run`'s mixed workload's
flags (--workload mix, engine/traffic_mix.py), and the per-class table the run prints."""

from __future__ import annotations

import argparse

from ..calc.traffic import ClassRecord, class_stats
from ..errors import ConfigError
from ..lab.params import Int, Lengths, Rate
from ..traffic import ORDERS, OVER_QUOTA, TrafficPolicy, parse_classes
from ..traffic_mix import FLOOD_TENANT, MixSpec
from .common import arg_type

MIX = "mix"


def classes_arg(text: str) -> str:
    """The --classes text, read once here so that a bad spec exits 2 with one line."""
    try:
        parse_classes(text)
    except ConfigError as err:
        raise argparse.ArgumentTypeError(str(err)) from None
    return text


def add_class_options(p, over_quota: str) -> None:
    """--classes, --class-order and --over-quota (default `over_quota`), on `run` and `serve`."""
    p.add_argument("--classes", type=classes_arg, default=None, metavar="SPEC",
                   help="traffic classes, 'name:key=value,...;name:...' (keys: priority, "
                        "weight, max_running, max_waiting, max_prompt, max_new, rate, burst, "
                        "tenant_rate, tenant_burst); continuous only; default: one FIFO queue")
    p.add_argument("--class-order", choices=ORDERS, default="strict",
                   help="strict: the highest priority class first; weighted: admissions in "
                        "proportion to the weights (default strict)")
    p.add_argument("--over-quota", choices=OVER_QUOTA, default=over_quota,
                   help="a request its tenant's bucket cannot pay for now: wait in its lane "
                        f"until the bucket refills, or refuse it (default {over_quota})")


def add_traffic_options(p) -> None:
    """--classes, --class-order, --over-quota and the mix's flags, on `run`."""
    add_class_options(p, "wait")
    p.add_argument("--batch-requests", type=arg_type(Int(lo=0), "batch requests"), default=8,
                   help="mix: the batch job's long summaries, all at t=0 (default 8)")
    p.add_argument("--batch-prompt-len", type=arg_type(Lengths(single=True),
                                                       "batch prompt length"),
                   default=(512, 768), help="mix: the batch job's prompt tokens (default 512:768)")
    p.add_argument("--batch-output-len", type=arg_type(Lengths(single=True),
                                                       "batch output length"),
                   default=(32, 64), help="mix: the batch job's output tokens (default 32:64)")
    p.add_argument("--users", type=arg_type(Int(lo=1), "users"), default=4,
                   help="mix: chat tenants the --requests chat requests come from (default 4)")
    p.add_argument("--flood-requests", type=arg_type(Int(lo=0), "flood requests"), default=0,
                   help=f"mix: interactive requests from one tenant, {FLOOD_TENANT!r} "
                        "(default 0)")
    p.add_argument("--flood-rate", type=arg_type(Rate(), "flood rate"), default=20.0,
                   help="mix: the flooding tenant's requests per second (default 20)")


def traffic_from_args(args) -> TrafficPolicy | None:
    if args.classes is None:
        return None
    return parse_classes(args.classes, args.class_order, args.over_quota)


def mix_from_args(args) -> MixSpec:
    """The mix the flags describe: chat requests from --requests, --rate, --prompt-len and
    --output-len, beside the batch job and the flood."""
    spec = MixSpec(
        chat_requests=args.requests, chat_rate=args.rate, chat_prompt=args.prompt_len,
        chat_output=args.output_len, users=args.users, batch_requests=args.batch_requests,
        batch_prompt=args.batch_prompt_len, batch_output=args.batch_output_len,
        flood_requests=args.flood_requests, flood_rate=args.flood_rate, seed=args.seed)
    spec.validate()
    return spec


def class_table(requests: list[dict]) -> str:
    """Per class (the flooding tenant apart): requests, refusals, TTFT P50/P99 and output
    tokens per second over the class's span."""
    stats = class_stats((ClassRecord.from_json(r) for r in requests), FLOOD_TENANT)
    rows = [f"{'class':<20}{'done':>6}{'refused':>9}{'TTFT p50':>10}{'TTFT p99':>10}"
            f"{'tok/s':>9}"]
    for s in stats.values():
        def ms(e):
            return "n/a" if e.value is None else f"{e.value:.0f}"
        tps = "n/a" if s.throughput_tok_s is None else f"{s.throughput_tok_s:.1f}"
        rows.append(f"{s.name:<20}{s.completed:>6}{s.refused:>9}{ms(s.ttft_p50):>10}"
                    f"{ms(s.ttft_p99):>10}{tps:>9}")
    return "\n".join(rows)

