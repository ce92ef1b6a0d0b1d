"""`run --disaggregate`: the workload served by a prefill worker and a decode worker, live where
this process may run on two cores or more, else computed from measured costs (engine/disagg);
the output says which."""

from __future__ import annotations

from ..config import EngineConfig
from ..errors import ConfigError
from ..serve.workload import make_workload
from ..tokenizer import Tokenizer
from .common import emit_json


def add_disaggregate_options(p) -> None:
    from ..disagg.serve import MODES

    p.add_argument("--disaggregate", action="store_true",
                   help="prefill in one worker process, decode in another, the KV handed over "
                        "through shared memory (continuous policy, greedy)")
    p.add_argument("--disagg-mode", choices=MODES, default="auto",
                   help="live: two worker processes, a core each at least; replay: the "
                        "workload computed from step costs and handovers measured on one "
                        "engine; auto: live where there are two cores (default auto)")


def cmd_run_disaggregated(args, spec, config) -> int:
    from ..disagg.serve import run_disaggregated

    if args.speculative != "off" or args.prefix_cache == "on":
        raise ConfigError("--disaggregate runs without --speculative and --prefix-cache")
    if args.weights != "fp32":
        raise ConfigError("--disaggregate runs fp32 weights only")
    budget = args.kv_budget_mib * 2**20 if args.kv_budget_mib else None
    engine_config = EngineConfig(preset=args.preset, device=args.device, backend=args.backend,
                                 kv_budget_bytes=budget)
    requests = make_workload(spec, Tokenizer())
    result = run_disaggregated(engine_config, requests, config, args.disagg_mode,
                               slo_ttft_ms=args.slo_ttft_ms, slo_tpot_ms=args.slo_tpot_ms)
    result.extra["workload"] = spec.to_json()
    if args.json:
        emit_json(result.to_json())
        return 0
    from .run import summary_table

    info = result.extra["disaggregation"]
    title = (f"disaggregated ({info['mode']}): prefill worker + decode worker (max batch "
             f"{config.max_batch}) - {spec.kind} workload, {spec.requests} requests - "
             f"{result.preset} on {result.device}")
    print(summary_table(result.metrics, title))
    handovers = sorted(h for h in info["handover_ms"] if h is not None)
    if handovers:
        print(f"handover (first token to the decode worker holding the KV): median "
              f"{handovers[len(handovers) // 2]:.2f} ms, max {handovers[-1]:.2f} ms")
    print(info["label"])
    return 0
