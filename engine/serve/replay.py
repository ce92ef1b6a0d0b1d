"""Replaying a request trace (`--trace FILE`): one JSON object a line with a timestamp, an input
and an output length and, optionally, the ids of the prompt's blocks, as the Mooncake trace
format has them (kvcache-ai/Mooncake, FAST 2025: `timestamp` in ms, `input_length`,
`output_length`, `hash_ids`).

Each line becomes a request arriving at (timestamp - the first timestamp) / 1000 s (divided
by `speed`), asking for output_length tokens. Its prompt is input_length tokens: block k of it
is the text that hash id hash_ids[k] stands for (block_tokens tokens drawn from the corpus with
the hash id as the seed, so two requests with the same leading ids share that prefix, which is
what a prefix cache reuses; Mooncake's blocks are 512 tokens); a prompt longer than its blocks
goes on with tokens of its own, and one shorter is cut. Lines are sorted by timestamp.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..errors import ConfigError
from .workload import PromptSource, Request

MOONCAKE_BLOCK_TOKENS = 512


@dataclass(frozen=True)
class TraceRow:
    timestamp_ms: float
    input_length: int
    output_length: int
    hash_ids: list[int] = field(default_factory=list)


def load_trace(path: str | Path) -> list[TraceRow]:
    """The rows of a trace file, sorted by timestamp; ConfigError naming the line at fault."""
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as e:
        raise ConfigError(f"cannot read the trace {path}: {e.strerror or e}") from None
    rows = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"trace {path.name} line {n}"
        try:
            d = json.loads(line)
            row = TraceRow(float(d["timestamp"]), int(d["input_length"]),
                           int(d["output_length"]), [int(h) for h in d.get("hash_ids") or []])
        except (ValueError, KeyError, TypeError) as e:
            raise ConfigError(f"{where}: not a trace row with timestamp, input_length and "
                              f"output_length ({type(e).__name__}: {e})") from None
        if row.input_length < 1 or row.output_length < 1 or not row.timestamp_ms >= 0:
            raise ConfigError(f"{where}: lengths must be at least 1 and the timestamp 0 or "
                              "more")
        rows.append(row)
    if not rows:
        raise ConfigError(f"the trace {path} has no rows")
    return sorted(rows, key=lambda r: r.timestamp_ms)


def trace_requests(rows: list[TraceRow], tokenizer=None, block_tokens: int =
                   MOONCAKE_BLOCK_TOKENS, speed: float = 1.0, seed: int = 0) -> list[Request]:
    """The requests of a trace (module docstring), ids 0..n-1 in arrival order."""
    if block_tokens < 1 or not speed > 0:
        raise ConfigError("trace block tokens must be at least 1 and the speed above 0")
    source = PromptSource(tokenizer)
    blocks: dict[int, list[int]] = {}
    t0 = rows[0].timestamp_ms
    out = []
    for i, row in enumerate(rows):
        ids: list[int] = []
        for h in row.hash_ids:
            if len(ids) >= row.input_length:
                break
            if h not in blocks:
                blocks[h] = source.prompt(block_tokens, np.random.default_rng([seed, 2, h]))
            ids += blocks[h]
        if len(ids) < row.input_length:
            own = source.prompt(row.input_length - len(ids), np.random.default_rng([seed, 3, i]))
            ids += own
        out.append(Request(i, ids[:row.input_length], row.output_length,
                           arrival_s=(row.timestamp_ms - t0) / 1000 / speed))
    return out
