"""`python -m engine invariance`: one greedy prompt alone and inside batches of other requests
(and with chunked prefill), compared bit by bit (engine/invariance.py): the largest logit
difference in float32 units in the last place and absolute, where the text first differs, and
how many seeds' texts differ. --batch-invariant runs the engine in its batch-invariant mode,
where every difference must be zero."""

from __future__ import annotations

from ..errors import ConfigError
from ..invariance import MAX_BATCH, measure_invariance, validate
from ..lab.params import Int
from .common import UsageError, arg_type, emit_json, int_list, make_engine, positive_int

DEFAULT_BATCH_SIZES = [1, 2, 8, 32, 64]


def cmd_invariance(args) -> int:
    chunk = args.chunk_size if args.chunked_prefill else 0
    try:
        validate(args.batch_sizes, args.seeds, args.prompt_len, args.new_tokens, chunk)
    except ConfigError as e:
        raise UsageError(str(e)) from None
    engine = make_engine(args)
    if not args.json:
        mode = "batch-invariant" if engine.config.batch_invariant else "default"
        print(f"{args.preset} on {engine.device} ({engine.backend}, {mode} mode), "
              f"{'chunked prefill of ' + str(chunk) + ' tokens' if chunk else 'whole prefill'}, "
              f"{args.seeds} seeds", flush=True)
        print(f"{'batch':>5} {'texts differ':>12} {'first diff':>12} {'max ULP':>10} "
              f"{'max |diff|':>11} {'step ms':>8}", flush=True)

    def show(p) -> None:
        if args.json:
            return
        firsts = [s.first_diff for s in p.seeds if s.first_diff is not None]
        first = str(min(firsts)) if firsts else "none"
        step = f"{p.step_ms:>8.2f}" if p.step_ms is not None else f"{'-':>8}"
        print(f"{p.batch:>5} {p.texts_differ:>6} of {len(p.seeds):<3} {first:>12} "
              f"{p.max_ulp:>10} {p.max_abs:>11.2e} {step}", flush=True)

    result = measure_invariance(engine, args.batch_sizes, args.seeds, args.prompt_len,
                                args.new_tokens, chunk, seed=args.seed, on_point=show)
    if args.json:
        emit_json(result.to_dict())
    return 0


def add_invariance_parser(sub, add_engine_options) -> None:
    p = sub.add_parser("invariance", help="the same greedy prompt alone and inside batches: how "
                                          "far its logits move, where its text first differs")
    p.add_argument("--batch-sizes", type=int_list("batch size"), default=DEFAULT_BATCH_SIZES,
                   help=f"rows of the batch, the prompt included (1 is alone), at most "
                        f"{MAX_BATCH} (default {','.join(map(str, DEFAULT_BATCH_SIZES))})")
    p.add_argument("--seeds", type=arg_type(Int(lo=1, hi=64), "seeds"), default=4,
                   help="prompts (and company) compared at each batch size (default 4)")
    p.add_argument("--seed", type=arg_type(Int(lo=0), "seed"), default=0,
                   help="the first seed (default 0)")
    p.add_argument("--prompt-len", type=positive_int("prompt length"), default=48)
    p.add_argument("--new-tokens", type=positive_int("new tokens"), default=32)
    p.add_argument("--chunked-prefill", action="store_true",
                   help="the others decode while the prompt is prefilled in chunks beside them")
    p.add_argument("--chunk-size", type=positive_int("chunk size"), default=16,
                   help="tokens per prefill chunk with --chunked-prefill (default 16)")
    add_engine_options(p)
    p.set_defaults(func=cmd_invariance)
