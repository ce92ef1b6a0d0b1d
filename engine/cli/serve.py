"""`python -m engine serve`: the engine as an OpenAI-compatible HTTP server (engine/serve/).

The port is opened before the model loads, so a taken port or a bad host is reported at once
(status 2, one line). When the server is ready it prints one line, or with --json one JSON
object, naming its URL; it serves until interrupted (Ctrl-C or SIGTERM). With --trace-out it
writes the engine's timeline (the history it keeps, engine/serve/online.py) when it stops.
With --classes (the syntax of `run --classes`) requests go into traffic classes, each request's
class and tenant read from the request (engine/serve/api_server.py); over a tenant's quota a
request is refused with 429 unless --over-quota wait.
"""

from __future__ import annotations

from ..scheduler import SchedulerConfig
from ..serve.api_server import listen, run_server
from ..serve.online import OnlineEngine
from .common import UsageError, add_trace_out, emit_json, make_engine
from .run import add_batch_options, whole
from .traffic_options import add_class_options, traffic_from_args


def add_serve_parser(sub, add_engine_options) -> None:
    """Register `serve` on the command line's subparsers."""
    p = sub.add_parser("serve", help="an OpenAI-compatible HTTP server (/v1) over the engine")
    p.add_argument("--host", default="127.0.0.1",
                   help="address to listen on (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=whole("port", 0), default=8000,
                   help="port to listen on; 0 picks a free one (default 8000)")
    add_batch_options(p)
    add_class_options(p, "refuse")
    add_trace_out(p)
    add_engine_options(p)
    p.set_defaults(func=cmd_serve)


def cmd_serve(args) -> int:
    if args.port > 65535:
        raise UsageError(f"port must be at most 65535 (got {args.port})")
    config = SchedulerConfig(policy="continuous", max_batch=args.max_batch,
                             chunk_size=args.chunk_size, traffic=traffic_from_args(args))
    config.validate()
    try:
        sock = listen(args.host, args.port)
    except OSError as e:
        raise UsageError(f"cannot listen on {args.host}:{args.port}: "
                         f"{e.strerror or e}") from None
    try:
        engine = make_engine(args)
        online = OnlineEngine(engine, config, args.preset)
        online.start()
    except BaseException:
        sock.close()
        raise
    host, port = sock.getsockname()[:2]
    url = f"http://{host if ':' not in host else f'[{host}]'}:{port}/v1"
    weights = "trained" if online.weights == "trained" else "random weights: timing only"
    if args.json:
        emit_json({"url": url, "model": args.preset, "device": engine.device,
                   "weights": online.weights, "max_batch": config.max_batch,
                   "kv_blocks_total": engine.blocks.num_blocks,
                   **({"traffic": config.traffic.to_json()} if config.traffic else {})})
    else:
        lanes = "" if config.traffic is None else \
            f", classes {', '.join(config.traffic.names)} ({config.traffic.order})"
        print(f"serving {args.preset} ({weights}) on {engine.device} at {url} "
              f"(continuous batching, max batch {config.max_batch}{lanes}); Ctrl-C stops it",
              flush=True)
    run_server(online, args.preset, sock, trace_out=args.trace_out)
    return 0
