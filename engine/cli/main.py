"""`python -m engine info | generate | sweep | experts | run | serve | bench-client | build-kernel | tune`:
the command line.

`--json` prints exactly one JSON object on stdout. Bad arguments exit with status 2 and a single
line naming the limit; no command prints a traceback to a user (ENGINE_DEBUG=1 shows them).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from ..errors import ConfigError
from ..generate import generate
from ..lab.jobs.machine import machine_info
from ..lab.registry import DEVICES
from ..sampler import SamplingParams
from ..speculative import SpeculativeDecoder, make_draft
from ..sweep import sweep, validate
from .bench_client import add_bench_client_parser
from .common import (
    EXIT_USAGE,
    OneLineParser,
    UsageError,
    add_engine_options,
    add_speculative_options,
    emit_json,
    int_list,
    kv_format,
    make_engine,
    non_negative_float,
    positive_int,
    weight_format,
)
from .experts import add_experts_parser
from .invariance import add_invariance_parser
from .run import add_run_parser
from .serve import add_serve_parser
from .tune import add_tune_parser


# ---- info ------------------------------------------------------------------------------------
def cmd_info(args) -> int:
    if not args.json:
        print("measuring memory bandwidth and matmul peak (cached after the first time)...",
              file=sys.stderr)
    info = machine_info(args.device, refresh=args.refresh)
    check = info["check"]
    if check and check["disturbed"]:
        print("these limits were measured while other work took the cores ("
              + "; ".join(check["reasons"]) + "): not cached; run it again when the machine "
              "is quiet", file=sys.stderr)
    if args.json:
        emit_json(info)
        return 0
    print(f"device   {info['device_name']}  ({info['threads']} threads, torch {info['torch']})")
    ridge = info["matmul_gflops"] / info["memory_bandwidth_gbs"]
    print(f"memory   {info['memory_bandwidth_gbs']:.1f} GB/s read bandwidth")
    print(f"compute  {info['matmul_gflops']:.0f} GFLOP/s {info['matmul_dtype']} matmul "
          f"(ridge {ridge:.1f} FLOP/byte)")
    print()
    head = f"{'preset':<7} {'params':>8} {'layers':>6} {'hidden':>6} {'heads':>5} {'kv':>3} " \
           f"{'dim':>4} {'ffn':>5} {'vocab':>6} {'context':>7} {'dtype':>8} {'KV B/tok':>9}  weights"
    print(head)
    for p in info["presets"]:
        weights = "trained" if p["weights"] == "trained" else "random weights: timing only"
        print(f"{p['name']:<7} {p['params'] / 1e6:>7.1f}M {p['layers']:>6} {p['hidden']:>6} "
              f"{p['heads']:>5} {p['kv_heads']:>3} {p['head_dim']:>4} {p['intermediate']:>5} "
              f"{p['vocab']:>6} {p['context']:>7} {p['dtype']:>8} "
              f"{p['kv_bytes_per_token']:>9}  {weights}")
    return 0


# ---- build-kernel ----------------------------------------------------------------------------
def cmd_build_kernel(args) -> int:
    """Compile the CPU kernels once (engines never compile them themselves): decode attention,
    then the int8 linear."""
    from ..model.cpu_kernel import KERNELS, PAGED_DECODE, KernelBuildError, build_one, load_kernel

    for kernel in KERNELS:
        if load_kernel(kernel) is None:
            print(f"compiling the {kernel.what} (15 s to a minute on two cores)...",
                  file=sys.stderr)
        start = time.monotonic()
        try:
            path = build_one(kernel, lambda seconds: print(f"  still compiling, {seconds:.0f} s",
                                                           file=sys.stderr))
        except KernelBuildError as e:
            loss = ("the engine uses plain torch attention" if kernel is PAGED_DECODE
                    else "--weights int8 is refused")
            print(f"error: {e}; {loss} on this CPU", file=sys.stderr)
            return 1
        print(f"{kernel.what} ready ({time.monotonic() - start:.1f} s): {path}")
    return 0


# ---- generate --------------------------------------------------------------------------------
def cmd_generate(args) -> int:
    if not args.prompt:
        raise UsageError("--prompt is empty: give some text")
    engine = make_engine(args)
    began = time.perf_counter()
    ids = engine.tokenizer.encode(args.prompt)
    tokenize_s = time.perf_counter() - began
    context = engine.model_config.context
    if len(ids) + args.max_new_tokens > context:
        raise UsageError(
            f"prompt of {len(ids)} tokens plus {args.max_new_tokens} new tokens exceeds the "
            f"{args.preset} context of {context} positions"
        )
    sampling = SamplingParams(args.temperature, args.top_k, args.top_p, args.seed)
    try:
        sampling.validate()
    except ValueError as e:
        raise UsageError(str(e)) from None
    if args.speculative != "off" and not sampling.greedy:
        raise UsageError("--speculative accepts greedily: leave --temperature at 0")
    speculative = None
    if args.speculative != "off":
        speculative = SpeculativeDecoder(engine, make_draft(args.speculative, engine),
                                         args.spec_k)
    stream = args.stream and not args.json

    def show(event) -> None:
        sys.stdout.write(event.text)
        sys.stdout.flush()

    [gen] = generate(engine, [ids], args.max_new_tokens, sampling, on_token=show if stream else None,
                     speculative=speculative)
    spec = None if speculative is None else \
        {"method": args.speculative, **speculative.stats.to_json()}
    phases = gen.phases(tokenize_s)
    if args.json:
        emit_json({
            "device": engine.device,
            "preset": args.preset,
            "weights": engine.model_config.weights,
            "prompt": args.prompt,
            "prompt_tokens": len(ids),
            "text": gen.text,
            "tokens": [{"text": piece, "t_s": t} for piece, t in zip(gen.pieces, gen.token_times)],
            "ttft_ms": gen.ttft_ms,
            "tpot_ms": gen.tpot_ms,
            "phases": phases.to_json(),
            **weight_format(engine),
            **kv_format(engine),
            **({"speculative": spec} if spec else {}),
        })
        return 0
    if stream:
        print()
    else:
        print(gen.text)
    tpot = f"{gen.tpot_ms:.1f} ms" if gen.tpot_ms is not None else "n/a (one token)"
    int8 = ", int8 weights" if weight_format(engine) else ""
    int8 += ", fp8 KV" if kv_format(engine) else ""
    print(f"[{args.preset} on {engine.device}{int8}: TTFT {gen.ttft_ms:.1f} ms, TPOT {tpot}, "
          f"{len(gen.token_times)} tokens]", file=sys.stderr)
    print(f"[phases, ms: tokenize {1000 * phases.tokenize_s:.2f}, queue "
          f"{1000 * phases.queue_s:.2f}, prefill {1000 * phases.prefill_s:.2f}, decode "
          f"{1000 * phases.decode_s:.1f}, detokenize {1000 * phases.detokenize_s:.2f}, other "
          f"{1000 * phases.other_s:.2f}; E2E {1000 * phases.e2e_s:.1f}]", file=sys.stderr)
    if spec:
        rate = "n/a" if spec["acceptance_rate"] is None else f"{100 * spec['acceptance_rate']:.0f}%"
        print(f"[speculative {args.speculative}, k={args.spec_k}: {spec['steps']} target steps, "
              f"{spec['tokens_per_step'] or 0:.2f} tokens per step, {rate} of "
              f"{spec['proposed']} draft tokens accepted]", file=sys.stderr)
    return 0


# ---- sweep -----------------------------------------------------------------------------------
def cmd_sweep(args) -> int:
    for b in args.batch_sizes:
        try:
            validate(b, args.prompt_len, args.new_tokens)
        except ConfigError as e:
            raise UsageError(str(e)) from None
    engine = make_engine(args)
    for b in args.batch_sizes:  # refuse before printing anything
        engine.check_fits(b, args.prompt_len + args.new_tokens, prefill=args.prompt_len)
    if not args.json:
        print(f"{'batch':>5} {'TTFT ms':>9} {'TPOT ms':>9} {'tokens/s':>9} {'KV MiB':>8} "
              f"{'GB/s':>6}", flush=True)

    def show(p) -> None:
        if not args.json:
            print(f"{p.batch_size:>5} {p.ttft_ms:>9.1f} {p.tpot_ms:>9.2f} {p.tokens_per_s:>9.1f} "
                  f"{p.kv_bytes / 2**20:>8.2f} {p.achieved_gbs:>6.1f}", flush=True)

    points = sweep(engine, args.batch_sizes, args.prompt_len, args.new_tokens, on_point=show)
    if args.json:
        emit_json({
            "device": engine.device,
            "preset": args.preset,
            "weights": engine.model_config.weights,
            "backend": engine.backend,
            "path": engine.path,  # "fast" or "plain" (LLMEngine.path): the speed depends on it
            "weight_bytes": engine.model.weight_bytes(),
            **weight_format(engine),
            **kv_format(engine),
            "points": [p.to_dict() for p in points],
        })
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="python -m engine", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True, parser_class=OneLineParser)

    info = sub.add_parser("info", help="device, presets and measured hardware limits")
    info.add_argument("--device", default="auto", choices=DEVICES)
    info.add_argument("--refresh", action="store_true", help="measure the limits again")
    info.add_argument("--json", action="store_true")
    info.set_defaults(func=cmd_info)

    gen = sub.add_parser("generate", help="generate text from a prompt")
    gen.add_argument("--prompt", required=True)
    gen.add_argument("--max-new-tokens", type=positive_int("max new tokens"), default=64)
    gen.add_argument("--stream", action="store_true", help="print text as it arrives")
    gen.add_argument("--temperature", type=non_negative_float("temperature"), default=0.0,
                     help="0 (default) is greedy")
    gen.add_argument("--top-k", type=int, default=0)
    gen.add_argument("--top-p", type=float, default=1.0)
    gen.add_argument("--seed", type=int, default=0)
    add_speculative_options(gen)
    add_engine_options(gen)
    gen.set_defaults(func=cmd_generate)

    sw = sub.add_parser("sweep", help="decode step time against batch size")
    sw.add_argument("--batch-sizes", type=int_list("batch size"), default=[1, 2, 4, 8, 16, 32, 64])
    sw.add_argument("--prompt-len", type=positive_int("prompt length"), default=128)
    sw.add_argument("--new-tokens", type=positive_int("new tokens"), default=32)
    add_engine_options(sw)
    sw.set_defaults(func=cmd_sweep)

    add_experts_parser(sub, add_engine_options)
    add_run_parser(sub, add_engine_options)
    add_serve_parser(sub, add_engine_options)
    add_invariance_parser(sub, add_engine_options)
    add_bench_client_parser(sub)

    kernel = sub.add_parser("build-kernel", help="compile the CPU decode-attention kernel (once "
                                                 "per machine, about a minute)")
    kernel.set_defaults(func=cmd_build_kernel)
    add_tune_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        return args.func(args)
    except (UsageError, ConfigError) as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # never a traceback for a user; ENGINE_DEBUG=1 shows it
        if os.environ.get("ENGINE_DEBUG"):
            raise
        print(f"error: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
