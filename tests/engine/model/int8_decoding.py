"""Greedy decoding of the int8 tiny engine, shared by the C++ and Triton int8 tests as a plain
module (test modules are not imported as libraries)."""

from __future__ import annotations

import torch

from engine.llm_engine import LLMEngine

PROMPTS = ["The function returns a new list",
           "Return a new sorted list from the items in iterable. A custom key function can be "
           "supplied to customize the sort order, and the reverse flag can be set to request the "
           "result in descending order."]  # longer than int8.KERNEL_ROWS: a widened prefill


def decode(engine: LLMEngine, prompt: list[int], new_tokens: int):
    """Greedy tokens, and the logits each was chosen from."""
    seq = engine.new_sequence(prompt, new_tokens)
    logits = []
    try:
        engine.reserve(seq, seq.num_uncomputed)
        engine.step([], [(seq, seq.num_uncomputed)])
        logits.append(engine.runner.last_logits[seq.id])
        while not seq.done:
            engine.reserve(seq, 1)
            engine.step([seq], [])
            logits.append(engine.runner.last_logits[seq.id])
    finally:
        engine.release(seq)
    return seq.output_ids, torch.stack(logits)
