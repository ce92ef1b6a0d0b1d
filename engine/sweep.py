"""The batch-size sweep: how one decode step's time, and so throughput and per-user speed,
change with the number of sequences sharing it.

For each batch size B: B prompts of the same length are prefilled together (that step's time is
every member's TTFT), then decoded together; TPOT is the median decode step after warm-up steps,
and tokens/s is B / TPOT. Each point reports the bytes it streamed per step, so speed can be read
against the memory-bandwidth limit (the habit gpt-fast made common).

With `shared_prompt` the B members share one prompt: it is prefilled once and its keys and values
are copied into every other member's own blocks, what a batched prefill of B copies would write.
The decode steps then do exactly the work of any B sequences of that length (each reads its own
cache blocks), while the prefill costs one prompt's instead of B: at batch 64 the batched prefill
was most of a point's time on a CPU. TTFT is then the one prompt's prefill, not the batch's.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

import torch

from .calc.stats import deciles
from .calc.step_cost import decode_context, decode_cost
from .errors import ConfigError
from .llm_engine import LLMEngine
from .sequence import Sequence

WARMUP_STEPS = 2


@dataclass
class SweepPoint:
    batch_size: int
    ttft_ms: float  # the batched prefill step: every member's first token
    tpot_ms: float  # median decode step after warm-up
    tokens_per_s: float  # batch_size / decode step time
    kv_bytes: int  # KV cache the batch held at the end
    prompt_len: int
    new_tokens: int
    decode_steps_timed: int
    step_ms_p10: float
    step_ms_p90: float
    bytes_per_step: int  # weights plus the mean KV cache read per decode step (calc.step_cost)
    achieved_gbs: float  # bytes_per_step / TPOT
    flops_per_step: float  # about 2 x params x batch (matmuls) plus attention (calc.step_cost)
    prefill_tokens_per_s: float
    step_ms: list[float]  # every timed decode step (warm-up excluded), so a page can bound the median
    prefill: str = "batch"  # "batch": B prompts prefilled together; "shared": one, copied (above)

    def to_dict(self) -> dict:
        return asdict(self)


def validate(batch_size: int, prompt_len: int, new_tokens: int) -> None:
    if batch_size < 1:
        raise ConfigError(f"batch size must be at least 1 (got {batch_size})")
    if prompt_len < 1:
        raise ConfigError(f"prompt length must be at least 1 token (got {prompt_len})")
    if new_tokens < WARMUP_STEPS + 2:
        raise ConfigError(
            f"new tokens must be at least {WARMUP_STEPS + 2} so that decode steps remain "
            f"after {WARMUP_STEPS} warm-up steps (got {new_tokens})"
        )


def sweep_prompts(vocab: int, batch_size: int, prompt_len: int, seed: int) -> list[list[int]]:
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab, (batch_size, prompt_len), generator=gen).tolist()


def measure_point(engine: LLMEngine, batch_size: int, prompt_len: int = 128,
                  new_tokens: int = 32, seed: int = 0,
                  on_step: Callable[[int, int], None] | None = None,
                  cancelled: Callable[[], bool] | None = None,
                  shared_prompt: bool = False) -> SweepPoint | None:
    """Measure one batch size; returns None if cancelled. on_step(done, total) reports progress.
    shared_prompt: the members share one prompt, prefilled once (the module's docstring)."""
    validate(batch_size, prompt_len, new_tokens)
    cfg = engine.model_config
    if prompt_len + new_tokens > cfg.context:
        raise ConfigError(
            f"prompt of {prompt_len} + {new_tokens} new tokens exceeds the {cfg.name} context "
            f"of {cfg.context} positions"
        )
    engine.check_fits(batch_size, prompt_len + new_tokens, prefill=prompt_len)
    engine.warm_up()
    prompts = sweep_prompts(engine.tokenizer.vocab_size, 1 if shared_prompt else batch_size,
                            prompt_len, seed)
    if shared_prompt:
        prompts = [list(prompts[0]) for _ in range(batch_size)]
    seqs = [engine.new_sequence(p, new_tokens, ignore_eos=True) for p in prompts]
    steps: list[float] = []
    try:
        for seq in seqs:
            engine.reserve(seq, prompt_len)
        prefilled = seqs[:1] if shared_prompt else seqs
        start = time.perf_counter()
        engine.step([], [(seq, prompt_len) for seq in prefilled])
        ttft = time.perf_counter() - start
        if shared_prompt:
            copy_prefill(engine, seqs[0], seqs[1:])
        total = new_tokens - 1
        for done in range(total):
            if cancelled and cancelled():
                return None
            for seq in seqs:
                engine.reserve(seq, 1)
            start = time.perf_counter()
            engine.step(seqs, [])
            steps.append(time.perf_counter() - start)
            if on_step:
                on_step(done + 1, total)
        # both tables of a hybrid model: its full layers' blocks and its window layers' held
        kv_bytes = sum(len(s.block_table) + engine.blocks.window_blocks(s)
                       for s in seqs) * engine.cache.bytes_per_block
    finally:
        for seq in seqs:
            engine.release(seq)

    timed = steps[WARMUP_STEPS:]
    tpot = statistics.median(timed)
    cuts = deciles(timed)  # within the steps timed (engine.calc.stats.deciles)
    shape = {"params": cfg.params, "heads": cfg.heads, "head_dim": cfg.head_dim,
             "layers": cfg.layers, "weight_bytes": engine.model.weight_bytes(),
             "kv_bytes_per_token": engine.cache.bytes_per_token}
    cost = decode_cost(shape, batch_size, decode_context(prompt_len, new_tokens))
    bytes_per_step = int(cost.bytes)
    return SweepPoint(
        batch_size=batch_size,
        ttft_ms=1000 * ttft,
        tpot_ms=1000 * tpot,
        tokens_per_s=batch_size / tpot,
        kv_bytes=kv_bytes,
        prompt_len=prompt_len,
        new_tokens=new_tokens,
        decode_steps_timed=len(timed),
        step_ms_p10=1000 * cuts[0],
        step_ms_p90=1000 * cuts[-1],
        bytes_per_step=bytes_per_step,
        achieved_gbs=bytes_per_step / tpot / 1e9,
        flops_per_step=cost.flops,
        prefill_tokens_per_s=len(prefilled) * prompt_len / ttft,
        step_ms=[round(1000 * t, 4) for t in timed],
        prefill="shared" if shared_prompt else "batch",
    )


def copy_prefill(engine: LLMEngine, source: Sequence, targets: list[Sequence]) -> None:
    """Give each target (the same prompt, its blocks reserved) the state source's prefill left:
    its keys and values copied block for block into the target's own blocks (one copy per pool,
    every target at once), its prompt counted as computed and the same first token."""
    if not targets:
        return
    # a hybrid model's window table too: fresh from a whole prefill, none of it freed yet
    src = torch.tensor((source.block_table + source.window_table) * len(targets))
    dst = torch.tensor([block for seq in targets for block in seq.block_table + seq.window_table])
    if len(src) != len(dst):
        raise ValueError("copy_prefill: the targets' block tables differ from the source's")
    for pool in (engine.cache.k, engine.cache.v):  # (layers, blocks, block size, heads, dim)
        pool[:, dst] = pool[:, src]
    for seq in targets:
        seq.num_computed = source.num_computed
        seq.output_ids.append(source.output_ids[-1])


def sweep(engine: LLMEngine, batch_sizes: list[int], prompt_len: int = 128, new_tokens: int = 32,
          seed: int = 0, on_point: Callable[[SweepPoint], None] | None = None) -> list[SweepPoint]:
    """Measure each batch size in turn (all are checked against the limits first)."""
    for b in batch_sizes:
        validate(b, prompt_len, new_tokens)
        engine.check_fits(b, prompt_len + new_tokens, prefill=prompt_len)
    points = []
    for b in batch_sizes:
        point = measure_point(engine, b, prompt_len, new_tokens, seed)
        points.append(point)
        if on_point:
            on_point(point)
    return points
