"""What an fp8 KV cache costs in quality, measured on the trained tiny model through the engine's
own paged cache: the held-out loss with the model's float cache and with fp8, how often the
two pick the same next token, and the largest difference between their logits.

The held-out windows are lesson 11's (engine.quantization.heldout), and the agreement is
teacher-forced as there. Unlike int8 weights, a cache format only matters where attention reads
the cache, so each window runs through the engine: its first token as one step, then the rest as
one prefill chunk, whose attention reads every key and value back from the cache (the chunk's
own included, written first), with every row's logits kept.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F

from .llm_engine import LLMEngine
from .model_runner import build_batch
from .quantization import WINDOWS, heldout


@dataclass(frozen=True)
class KVQuality:
    preset: str
    windows: int
    positions: int  # next-token predictions compared
    loss_float: float  # mean next-token cross entropy with the model's float cache, nats
    loss_fp8: float
    agreement: float  # share of positions where fp8's top token is the float cache's
    max_logit_diff: float = 0.0  # largest |fp8 logit - float logit| over every position and token

    def to_json(self) -> dict:
        return asdict(self)


@torch.inference_mode()
def paged_logits(engine: LLMEngine, tokens: list[int]) -> torch.Tensor:
    """Logits (len(tokens), vocab) at every position of `tokens`, read through the paged cache:
    the first token, then the rest as one chunk, every row's logits kept."""
    seq = engine.new_sequence(tokens, 1, ignore_eos=True)
    runner, parts = engine.runner, []
    try:
        for count in (1, len(tokens) - 1):
            if not engine.reserve(seq, count):
                raise MemoryError(f"the KV pool cannot hold a {len(tokens)}-token window")
            inputs = build_batch([], [(seq, count)], engine.cache.block_size, engine.device)
            runner.attention.batch = inputs.attention
            hidden = engine.model(inputs.input_ids, inputs.positions, runner.attention)
            parts.append(engine.model.logits(hidden).float())
            seq.num_computed += count
        return torch.cat(parts)
    finally:
        engine.release(seq)


def kv_quality(engine: LLMEngine, windows: int = WINDOWS) -> KVQuality:
    """Both formats on the same engine (set_kv_dtype): every window with the float cache, then
    with fp8; the engine is left on its float cache."""
    held = heldout(windows)
    count = held.shape[0] * (held.shape[1] - 1)
    losses, picks, float_logits, largest = [], [], [], 0.0
    for kv_dtype in ("auto", "fp8"):
        engine.set_kv_dtype(kv_dtype)
        try:
            total, chosen = 0.0, []
            for i, window in enumerate(held):
                logits = paged_logits(engine, window[:-1].tolist())
                total += F.cross_entropy(logits, window[1:], reduction="sum").item()
                chosen.append(logits.argmax(-1))
                if kv_dtype == "auto":
                    float_logits.append(logits)
                else:
                    largest = max(largest, (logits - float_logits[i]).abs().max().item())
        finally:
            engine.set_kv_dtype("auto")
        losses.append(total / count)
        picks.append(torch.cat(chosen))
    same = (picks[0] == picks[1]).sum().item() / count
    return KVQuality(engine.model_config.name, held.shape[0], count, losses[0], losses[1], same,
                     largest)
