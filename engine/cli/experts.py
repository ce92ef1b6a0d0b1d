"""`python -m engine experts`: the sweep on a mixture-of-experts preset (and, with --dense, the
dense preset of its active size after it), with the distinct experts each decode step read,
the uniform router's expectation and the weight bytes a step read (engine.experts)."""

from __future__ import annotations

from ..errors import ConfigError
from ..experts import measure_experts_point
from ..sweep import validate
from .common import UsageError, emit_json, int_list, make_engine, positive_int, preset_name


def cmd_experts(args) -> int:
    for b in args.batch_sizes:
        try:
            validate(b, args.prompt_len, args.new_tokens)
        except ConfigError as e:
            raise UsageError(str(e)) from None
    models = []
    for preset in [args.preset] + ([args.dense] if args.dense else []):
        args.preset = preset
        engine = make_engine(args)
        for b in args.batch_sizes:  # refuse before printing anything
            engine.check_fits(b, args.prompt_len + args.new_tokens, prefill=args.prompt_len)
        if not args.json:
            cfg = engine.model_config
            what = (f"{cfg.experts} experts, top-{cfg.top_k}" if cfg.experts else "dense")
            print(f"{preset} ({what}; {cfg.params / 1e6:.1f}M parameters, "
                  f"{cfg.active_params / 1e6:.1f}M active"
                  + ("; random weights: timing only)" if cfg.weights == "random" else ")"))
            print(f"{'batch':>5} {'experts':>8} {'uniform':>8} {'MiB/step':>9} {'TPOT ms':>9} "
                  f"{'tokens/s':>9}", flush=True)
        points = []
        for b in args.batch_sizes:
            p = measure_experts_point(engine, b, args.prompt_len, args.new_tokens)
            points.append(p.to_dict())
            if not args.json:
                print(f"{b:>5} {p.experts_read:>8.2f} {p.expected_experts:>8.2f} "
                      f"{p.step_weight_bytes / 2**20:>9.1f} {p.point.tpot_ms:>9.2f} "
                      f"{p.point.tokens_per_s:>9.1f}", flush=True)
        models.append({"preset": preset, "weights": engine.model_config.weights,
                       "experts": engine.model_config.experts,
                       "top_k": engine.model_config.top_k,
                       "params": engine.model_config.params,
                       "active_params": engine.model_config.active_params,
                       "weight_bytes": engine.model.weight_bytes(), "points": points})
        device, backend = engine.device, engine.backend
        del engine
    if args.json:
        emit_json({"device": device, "backend": backend, "models": models})
    return 0


def add_experts_parser(sub, add_engine_options) -> None:
    p = sub.add_parser("experts", help="an MoE model's experts read, bytes and step time "
                                       "against batch size, beside a dense model")
    p.add_argument("--batch-sizes", type=int_list("batch size"), default=[1, 2, 4, 8, 16, 32, 64])
    p.add_argument("--prompt-len", type=positive_int("prompt length"), default=64)
    p.add_argument("--new-tokens", type=positive_int("new tokens"), default=16)
    p.add_argument("--dense", type=preset_name, default=None,
                   help="a dense preset measured after it (moe-mini-dense: moe-mini's active "
                        "size)")
    add_engine_options(p, default_preset="moe-mini")
    p.set_defaults(func=cmd_experts)
