"""What every command of `python -m engine` shares: the one-line parser and usage error, the
argument types (each names the limit it enforces), the engine options, building the engine from
them, and printing one JSON object."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ..config import KV_DTYPES, PRESETS, WEIGHT_FORMATS, EngineConfig, get_preset
from ..errors import ConfigError
from ..lab.params import Float, Int, Param
from ..lab.registry import BACKENDS, DEVICES
from ..llm_engine import LLMEngine

EXIT_USAGE = 2


class UsageError(Exception):
    """Bad input from the user: exit status 2 and one line."""


class OneLineParser(argparse.ArgumentParser):
    """argparse prints usage plus an error over several lines; the contract wants one line."""

    def error(self, message: str):
        raise UsageError(message)


# ---- argument types: the checks job parameters get (engine.lab.params), on a flag's text ------
def arg_type(param: Param, what: str):
    """An argparse type from a parameter declaration: its ConfigError, one line naming the
    limit, becomes argparse's error."""
    def parse(text: str):
        try:
            return param.parse(text, what)
        except ConfigError as e:
            raise argparse.ArgumentTypeError(str(e)) from None
    return parse


def positive_int(what: str):
    return arg_type(Int(lo=1), what)


def non_negative_float(what: str):
    return arg_type(Float(lo=0.0), what)


def int_list(what: str):
    one = positive_int(what)

    def parse(text: str) -> list[int]:
        items = [t for t in text.split(",") if t.strip()]
        if not items:
            raise argparse.ArgumentTypeError(f"{what}: give a comma-separated list, like 1,4,16")
        return [one(t.strip()) for t in items]
    return parse


def output_file(text: str) -> Path:
    """A file to write (--trace-out, --result-json): its folder must exist, and it must not be a
    folder itself; checked before anything runs, so a typo costs no measurement."""
    path = Path(text)
    if not text or path.is_dir():
        raise argparse.ArgumentTypeError(f"{text!r} is a folder: give a file name")
    if not path.resolve().parent.is_dir():
        raise argparse.ArgumentTypeError(f"cannot write {text}: its folder does not exist")
    return path


def add_trace_out(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--trace-out", type=output_file, default=None, metavar="FILE",
                        help="write the timeline as Chrome/Perfetto trace-event JSON (open it "
                             "in ui.perfetto.dev or chrome://tracing)")


def preset_name(text: str) -> str:
    try:
        get_preset(text)
    except ConfigError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return text


def add_engine_options(parser: argparse.ArgumentParser, default_preset: str = "tiny") -> None:
    parser.add_argument("--preset", type=preset_name, default=default_preset,
                        help=f"model preset: {', '.join(PRESETS)} (default {default_preset})")
    parser.add_argument("--device", default="auto", choices=DEVICES)
    parser.add_argument("--backend", default="auto", choices=BACKENDS,
                        help="decode attention: triton on CUDA; on CPU cpp (a C++ kernel) where "
                             "python -m engine build-kernel has built it, else torch")
    parser.add_argument("--weights", default="fp32", choices=WEIGHT_FORMATS,
                        help="fp32: the preset's own dtype; int8: every linear layer's weight as "
                             "int8 with a scale per row (CPU after python -m engine "
                             "build-kernel; CUDA with triton)")
    parser.add_argument("--kv-dtype", default="auto", choices=KV_DTYPES,
                        help="auto: keys and values in the model's dtype; fp8: float8 e4m3 with "
                             "a float32 scale per block and KV head, read by the torch "
                             "attention path")
    parser.add_argument("--kv-budget-mib", type=positive_int("KV budget (MiB)"), default=None,
                        help="KV cache memory budget in MiB (default: a share of free memory)")
    parser.add_argument("--batch-invariant", action="store_true",
                        help="compute every row of a step alone, so tokens and logits do not "
                             "depend on the batch or the prefill chunking (costs about a batch-1 "
                             "step per row)")
    parser.add_argument("--json", action="store_true", help="print one JSON object on stdout")


def make_engine(args) -> LLMEngine:
    budget = args.kv_budget_mib * 2**20 if args.kv_budget_mib else None
    return LLMEngine(EngineConfig(
        preset=args.preset, device=args.device, backend=args.backend, kv_budget_bytes=budget,
        prefix_caching=getattr(args, "prefix_cache", "off") == "on",
        weight_format=args.weights, kv_dtype=args.kv_dtype,
        batch_invariant=args.batch_invariant,
    ))


def weight_format(engine: LLMEngine) -> dict:
    """{"weight_format": "int8"} for an engine with int8 weights, else nothing: the JSON of a
    float run stays as it was."""
    fmt = engine.config.weight_format
    return {} if fmt == "fp32" else {"weight_format": fmt}


def kv_format(engine: LLMEngine) -> dict:
    """{"kv_dtype": "fp8"} for an engine with an fp8 KV cache, else nothing."""
    fmt = engine.config.kv_dtype
    return {} if fmt == "auto" else {"kv_dtype": fmt}


def emit_json(obj: dict) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def add_speculative_options(p) -> None:
    """--speculative and --spec-k, for `generate` and `run`."""
    from ..speculative import MAX_K, METHODS

    p.add_argument("--speculative", choices=("off", *METHODS), default="off",
                   help="speculative decoding (greedy only): ngram = prompt lookup, draft = "
                        "the small draft model (default off)")
    p.add_argument("--spec-k", type=arg_type(Int(lo=1, hi=MAX_K), "spec k"), default=4,
                   help=f"draft tokens proposed per step, 1 to {MAX_K} (default 4)")
