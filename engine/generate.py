"""Offline generation: a set of prompts, all present at once, prefilled then decoded together.

This is the simplest schedule there is (no arrivals, no queue); the serving loop in serve/loop.py
adds real-time arrivals and batching policies. Used by `python -m engine generate`, the tests,
and the first lesson's streaming demo.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from .errors import ConfigError
from .llm_engine import LLMEngine
from .sampler import SamplingParams
from .sequence import Sequence
from .serve.phases import RequestPhases
from .speculative import SpeculativeDecoder
from .tokenizer import IncrementalDecoder


@dataclass
class TokenEvent:
    """One new token of one sequence, stamped after the device finished its step."""

    seq_id: int
    index: int  # 0 for the first output token
    token_id: int
    text: str
    t_s: float  # seconds since generation started


@dataclass
class Generation:
    seq: Sequence
    text: str
    token_times: list[float] = field(default_factory=list)
    pieces: list[str] = field(default_factory=list)
    # Its time by phase (engine.serve.phases), seconds: waiting through the other prompts'
    # prefill steps, its own prefill steps, the decode steps it ran in, the tokenizer's time on
    # its output, and when its text was ready (from generation's start).
    queue_s: float = 0.0
    prefill_s: float = 0.0
    decode_s: float = 0.0
    detokenize_s: float = 0.0
    text_ready_s: float = 0.0

    @property
    def ttft_ms(self) -> float:
        return 1000 * self.token_times[0]

    @property
    def tpot_ms(self) -> float | None:
        """Mean time per output token after the first; None with a single token."""
        n = len(self.token_times)
        return None if n < 2 else 1000 * (self.token_times[-1] - self.token_times[0]) / (n - 1)

    def phases(self, tokenize_s: float = 0.0) -> RequestPhases:
        """Its time by phase, with tokenize_s, the caller's time tokenizing its prompt before
        generation started; end to end is that plus generation's start to its text."""
        e2e = tokenize_s + self.text_ready_s
        covered = tokenize_s + self.queue_s + self.prefill_s + self.decode_s + self.detokenize_s
        return RequestPhases(tokenize_s=tokenize_s, queue_s=self.queue_s,
                             prefill_s=self.prefill_s, decode_s=self.decode_s,
                             detokenize_s=self.detokenize_s, other_s=e2e - covered, e2e_s=e2e)


def generate(engine: LLMEngine, prompts: list[list[int]], max_new_tokens: int,
             sampling: SamplingParams | None = None, on_token: Callable[[TokenEvent], None] |
             None = None, cancelled: Callable[[], bool] | None = None,
             prefill_chunk: int | None = None, ignore_eos: bool = False,
             speculative: SpeculativeDecoder | None = None) -> list[Generation]:
    """Generate for every prompt at once; prompts are prefilled (in chunks of prefill_chunk
    tokens if given), then all decode together, one token each per step, or, with a
    speculative decoder, one verify step at a time (several tokens each, stamped together)."""
    if max_new_tokens < 1:
        raise ConfigError("max new tokens must be at least 1")
    seqs = [
        engine.new_sequence(p, max_new_tokens, _copy(sampling, i), ignore_eos=ignore_eos)
        for i, p in enumerate(prompts)
    ]
    engine.check_fits(1, max(s.num_tokens + max_new_tokens for s in seqs))
    needed = sum(engine.blocks_per_sequence(s.num_tokens + max_new_tokens, s.num_tokens,
                                            prefill_chunk or 0) for s in seqs)
    if needed > engine.blocks.num_free:
        raise ConfigError(
            f"{len(seqs)} sequences need {needed} KV blocks; {engine.blocks.num_free} are free"
        )
    results = {s.id: Generation(seq=s, text="") for s in seqs}
    decoders = {s.id: IncrementalDecoder(engine.tokenizer) for s in seqs}
    start = time.perf_counter()

    def record(tokens: dict[int, list[int]]) -> None:
        now = time.perf_counter() - start  # engine.step returns after the device finished
        for seq_id, toks in tokens.items():
            result = results[seq_id]
            for tok in toks:
                pushed = time.perf_counter()
                piece = decoders[seq_id].push(tok)
                result.detokenize_s += time.perf_counter() - pushed
                result.token_times.append(now)
                result.pieces.append(piece)
                if on_token:
                    on_token(TokenEvent(seq_id, len(result.token_times) - 1, tok, piece, now))

    try:
        for seq in seqs:
            while not seq.output_ids:
                if cancelled and cancelled():
                    return list(results.values())
                cached = engine.blocks.cached_prefix(seq)  # 0 unless prefix caching hits
                left = seq.num_uncomputed - cached
                count = left if not prefill_chunk else min(prefill_chunk, left)
                engine.reserve(seq, count, cached)
                began = time.perf_counter()
                tokens = engine.step([], [(seq, count)])
                took = time.perf_counter() - began
                for other in seqs:  # the others wait through this prompt's prefill
                    if other is seq:
                        results[seq.id].prefill_s += took
                    else:
                        results[other.id].queue_s += took
                record(_lists(tokens))
        running = [s for s in seqs if not s.finished]
        while running:
            if cancelled and cancelled():
                break
            began = time.perf_counter()
            if speculative is not None:
                tokens = speculative.step(running)
            else:
                for seq in running:
                    engine.reserve(seq, 1)
                tokens = _lists(engine.step(running, []))
            took = time.perf_counter() - began
            for seq in running:
                results[seq.id].decode_s += took
            record(tokens)
            running = [s for s in running if not s.finished]
    finally:
        for seq in seqs:
            engine.release(seq)
            if speculative is not None:
                speculative.release(seq)
    for gen in results.values():
        began = time.perf_counter()
        gen.text = decoders[gen.seq.id].tokenizer.decode(gen.seq.output_ids)
        ended = time.perf_counter()
        gen.detokenize_s += ended - began
        gen.text_ready_s = ended - start
    return list(results.values())


def _lists(tokens: dict[int, int]) -> dict[int, list[int]]:
    return {seq_id: [tok] for seq_id, tok in tokens.items()}


def _copy(sampling: SamplingParams | None, index: int) -> SamplingParams:
    """Each sequence gets its own generator, seeded from the shared seed and its position."""
    if sampling is None:
        return SamplingParams()
    return SamplingParams(sampling.temperature, sampling.top_k, sampling.top_p,
                          seed=sampling.seed + index)
