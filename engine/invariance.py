"""Does a prompt's answer depend on its company? One greedy prompt run alone, then inside a
batch of other requests (and with its prefill cut into chunks beside them), compared bit by bit.

For each batch size and seed (the seed picks the prompt and its company from the corpus):
- the prompt runs alone: prefilled whole, then decoded greedily, its logits kept at every token;
- it runs again inside a batch of `batch - 1` other requests: all prefilled in one step, then
  decoded together; with `chunk` > 0 the others are already decoding when it arrives, and its
  prompt is prefilled `chunk` tokens a step beside their decode rows (chunked prefill);
- the two are compared: the largest logit difference, absolute and in float32 units in the last
  place (ULP: how many representable floats lie between the two values), over the tokens whose
  context is still the same (up to and including the first token that differs), and the index
  of the first output token that differs (None where the texts agree).

`measure_invariance` returns typed records (engine.lab.results); the CLI (`python -m engine
invariance`) and the lab's `invariance` job print or return them. With the engine's
batch-invariant mode on (EngineConfig.batch_invariant) every difference must be zero.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import torch

from .errors import ConfigError
from .lab.quality import spread
from .lab.results import InvarianceBatch, InvarianceResult, InvarianceSeed, Spread
from .llm_engine import LLMEngine
from .sequence import Sequence
from .serve.workload import PromptSource

MAX_BATCH = 64 + 1  # the prompt and 64 others


@dataclass
class Trace:
    """What one run of the prompt gave: its tokens, its logits at each, and the decode steps'
    times (seconds, the batch's decode-only steps)."""

    tokens: list[int]
    logits: list[torch.Tensor]
    step_s: list[float]


def ulp_distance(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """How many float32 values lie between a and b, element by element (0: the same bits; 1:
    neighbours). The bits of a float32 read as an integer are ordered like the floats for
    positive values and reversed for negative ones; mapping negatives to -(bits & 0x7fffffff)
    makes one ordered integer line on which the distance is a subtraction."""
    def ordered(x: torch.Tensor) -> torch.Tensor:
        bits = x.float().contiguous().view(torch.int32).to(torch.int64)
        return torch.where(bits < 0, -(bits & 0x7FFFFFFF), bits)
    return (ordered(a) - ordered(b)).abs()


def validate(batch_sizes: list[int], seeds: int, prompt_len: int, new_tokens: int,
             chunk: int) -> None:
    """One line naming the first setting out of its limits (ConfigError)."""
    if not batch_sizes or min(batch_sizes) < 1 or max(batch_sizes) > MAX_BATCH:
        raise ConfigError(f"batch sizes run from 1 (alone) to {MAX_BATCH} (the prompt and 64 "
                          f"others), got {batch_sizes}")
    if seeds < 1:
        raise ConfigError(f"seeds must be at least 1 (got {seeds})")
    if prompt_len < 1 or new_tokens < 1:
        raise ConfigError("the prompt and the new tokens need at least one token each")
    if chunk < 0:
        raise ConfigError(f"chunk must be 0 (whole prompts) or more tokens (got {chunk})")


@contextmanager
def batch_invariant(engine: LLMEngine, on: bool):
    """The engine's runner in batch-invariant mode (or not) for the duration; restored after."""
    kept = engine.runner.batch_invariant
    engine.runner.batch_invariant = on
    try:
        yield
    finally:
        engine.runner.batch_invariant = kept


def measure_invariance(engine: LLMEngine, batch_sizes: list[int], seeds: int = 4,
                       prompt_len: int = 48, new_tokens: int = 32, chunk: int = 0,
                       invariant: bool | None = None, seed: int = 0,
                       on_point: Callable[[InvarianceBatch], None] | None = None,
                       cancelled: Callable[[], bool] | None = None) -> InvarianceResult | None:
    """The comparison at each batch size over `seeds` seeds (seed, seed + 1, ...), in the
    engine's own mode unless `invariant` says which; on_point gets each batch size's record as
    it is done. None where cancelled."""
    validate(batch_sizes, seeds, prompt_len, new_tokens, chunk)
    mode = engine.runner.batch_invariant if invariant is None else invariant
    source = PromptSource(engine.tokenizer, engine.model_config.vocab)
    points: list[InvarianceBatch] = []
    steps_ms: list[float] = []
    with batch_invariant(engine, mode):
        engine.warm_up()
        alone: dict[int, tuple[list[list[int]], Trace]] = {}
        for size in batch_sizes:
            runs: list[InvarianceSeed] = []
            step_s: list[float] = []
            for s in range(seed, seed + seeds):
                if cancelled and cancelled():
                    return None
                if s not in alone:
                    prompts = company(source, s, prompt_len)
                    alone[s] = prompts, run_prompt(engine, prompts[0], [], new_tokens, 0)
                prompts, reference = alone[s]
                others = prompts[1:size]
                trace = run_prompt(engine, prompts[0], others, new_tokens, chunk)
                runs.append(compare(s, reference, trace))
                step_s += trace.step_s
            point = InvarianceBatch(
                batch=size, seeds=runs,
                texts_differ=sum(r.first_diff is not None for r in runs),
                max_ulp=max(r.max_ulp for r in runs), max_abs=max(r.max_abs for r in runs),
                step_ms=1000 * statistics.median(step_s) if step_s else None)
            points.append(point)
            steps_ms += [1000 * t for t in step_s]
            if on_point:
                on_point(point)
    return InvarianceResult(
        preset=engine.model_config.name, device=engine.device, backend=engine.backend,
        batch_invariant=mode, chunk=chunk, prompt_len=prompt_len, new_tokens=new_tokens,
        points=points, spread=Spread.from_dict(spread(steps_ms, "decode steps")), check=None)


def company(source: PromptSource, seed: int, prompt_len: int) -> list[list[int]]:
    """The prompt (first) and 64 others, from the corpus at seeded offsets; the others' lengths
    are drawn between half and twice the prompt's, so their contexts differ from its own."""
    rng = np.random.default_rng(seed)
    prompts = [source.prompt(prompt_len, rng)]
    lengths = rng.integers(max(1, prompt_len // 2), 2 * prompt_len + 1, size=MAX_BATCH - 1)
    return prompts + [source.prompt(int(n), rng) for n in lengths]


def run_prompt(engine: LLMEngine, prompt: list[int], others: list[list[int]], new_tokens: int,
               chunk: int) -> Trace:
    """The prompt decoded greedily for new_tokens tokens beside `others` (see the module's
    docstring): its tokens and logits, and the decode-only steps' times."""
    steps_needed = new_tokens + (-(-len(prompt) // chunk) if chunk else 0) + 1
    target = engine.new_sequence(prompt, new_tokens, ignore_eos=True)
    rest = [engine.new_sequence(p, steps_needed, ignore_eos=True) for p in others]
    everyone = [target, *rest]
    needed = sum(-(-(s.num_tokens + steps_needed) // engine.cache.block_size) for s in everyone)
    if needed > engine.blocks.num_free:
        raise ConfigError(f"a batch of {len(everyone)} needs {needed} KV blocks; "
                          f"{engine.blocks.num_free} are free: give a larger KV budget")
    trace = Trace([], [], [])
    try:
        if chunk:  # the others first, then the prompt in chunks beside their decode rows
            if rest:  # alone (batch 1): no others to prefill, and an empty step runs nothing
                _step(engine, [], [(s, s.num_uncomputed) for s in rest], target, trace)
            while target.num_uncomputed > 1 or not target.output_ids:
                count = min(chunk, target.num_uncomputed)
                _step(engine, rest, [(target, count)], target, trace)
        else:
            _step(engine, [], [(s, s.num_uncomputed) for s in everyone], target, trace)
        while not target.finished:
            start = time.perf_counter()
            _step(engine, everyone, [], target, trace)
            trace.step_s.append(time.perf_counter() - start)
    finally:
        for seq in everyone:
            engine.release(seq)
    return trace


def _step(engine: LLMEngine, decode: list[Sequence], prefill: list[tuple[Sequence, int]],
          target: Sequence, trace: Trace) -> None:
    """One engine step (blocks reserved first); the target's logits kept when it got a token."""
    for seq in decode:
        engine.reserve(seq, 1)
    for seq, count in prefill:
        engine.reserve(seq, count)
    tokens = engine.step(decode, prefill)
    if target.id in tokens:
        trace.tokens.append(tokens[target.id])
        trace.logits.append(engine.runner.last_logits[target.id].clone())


def compare(seed: int, alone: Trace, batched: Trace) -> InvarianceSeed:
    """The batched run against the prompt alone: the first output token that differs, and the
    largest logit difference over the tokens computed on the same context (every token up to
    and including the first that differs)."""
    first = next((i for i, (a, b) in enumerate(zip(alone.tokens, batched.tokens, strict=True))
                  if a != b), None)
    same_context = len(alone.tokens) if first is None else first + 1
    a = torch.stack(alone.logits[:same_context])
    b = torch.stack(batched.logits[:same_context])
    return InvarianceSeed(
        seed=seed, first_diff=first, max_ulp=int(ulp_distance(a, b).max()),
        max_abs=float((a - b).abs().max()),
        differing_logits=int((a != b).sum()), compared_logits=a.numel())
