"""The engine: a model, its tokenizer, a paged KV cache and the block manager, on one device.

Everything that runs the model goes through `LLMEngine.step`; what to run in each step is decided
by its callers (the generation helpers, the sweep, the serving loop's schedulers).
"""

from __future__ import annotations

import itertools
import logging
import time

import torch

from .block_manager import BlockManager, peak_blocks
from .config import KV_DTYPES, WEIGHT_FORMATS, EngineConfig, checkpoint_path, get_preset
from .device import configure_threads, resolve_device, synchronize, torch_dtype
from .errors import ConfigError
from .model.kv_cache import PagedKVCache, default_budget
from .model.matmul_plan import (
    TUNED_ROWS,
    plan_key,
    rows_plan,
    save_step_plan,
    split_transposed,
    step_plan,
)
from .model.model import LlamaModel, load_checkpoint
from .model.step_plan import ROUNDS, broken, settle_steps
from .model_runner import ModelRunner
from .sampler import SamplingParams
from .sequence import Sequence
from .steps import Steps, run_steps
from .tokenizer import Tokenizer

log = logging.getLogger(__name__)

ENGINE_VERSION = "0.6.0"  # 0.6: the plan weighed in the whole decode step, one call at any plan


def default_backend(device: str, dtype: torch.dtype) -> str:
    """triton on CUDA; on CPU the C++ kernel where it is built (float32 caches), else plain
    torch. Never builds it: that takes a minute (python -m engine build-kernel)."""
    if device.startswith("cuda"):
        return "triton"
    from .model.cpu_kernel import paged_decode_kernel

    if dtype != torch.float32:
        return "torch"
    if paged_decode_kernel() is None:
        log.info("C++ decode-attention kernel not built here: plain torch attention "
                 "(python -m engine build-kernel builds it, about a minute)")
        return "torch"
    return "cpp"


def kv_backend(config: EngineConfig, device: str, dtype: torch.dtype) -> str:
    """The decode-attention backend for the engine's KV format: the default for the device, or
    the one asked for. An fp8 cache is read by the torch path only (it dequantizes the blocks
    it gathers): the C++ and Triton kernels read float pools."""
    if config.kv_dtype not in KV_DTYPES:
        raise ConfigError(f"unknown KV dtype {config.kv_dtype!r}: choose one of "
                          f"{', '.join(KV_DTYPES)}")
    if config.kv_dtype == "fp8":
        if config.backend not in ("auto", "torch"):
            raise ConfigError(f"an fp8 KV cache is read by the torch attention backend only, "
                              f"not {config.backend}: use --backend torch or auto")
        return "torch"
    if get_preset(config.preset).sliding_window:
        if config.backend not in ("auto", "torch"):
            raise ConfigError(f"sliding-window layers are read by the torch attention backend "
                              f"only, not {config.backend}: use --backend torch or auto")
        return "torch"
    return default_backend(device, dtype) if config.backend == "auto" else config.backend


def int8_kernel_for(device: str, dtype: torch.dtype):
    """The int8 linear kernel for an engine with int8 weights: on CUDA the Triton kernel
    (model/triton_int8.py), on the CPU the C++ one (float32, once built: never built here); or
    a ConfigError saying in one line why there is none."""
    if device.startswith("cuda"):
        try:
            from .model.triton_int8 import int8_linear_triton
        except ImportError:
            raise ConfigError("int8 weights on CUDA need the Triton int8 kernel, and triton is "
                              "not installed here: pip install triton, or use --weights fp32"
                              ) from None
        return int8_linear_triton
    if not device.startswith("cpu") or dtype != torch.float32:
        raise ConfigError(f"int8 weights have kernels for CUDA (Triton) and for the CPU in "
                          f"float32 (C++) only, not for {device} in {str(dtype)[6:]}: use "
                          f"--weights fp32")
    from .model.cpu_kernel import int8_linear_kernel

    kernel = int8_linear_kernel()
    if kernel is None:
        raise ConfigError("int8 weights need the C++ int8 linear kernel, which is not built on "
                          "this machine: run python -m engine build-kernel (about a minute), or "
                          "use --weights fp32")
    return kernel


def build_model(preset: str, device: str, seed: int = 0, random_weights: bool = False,
                int8_kernel=None):
    """The preset's model on the device in its dtype: trained weights for tiny (and the draft
    models), random otherwise; with `int8_kernel`, its linear layers' weights held as int8."""
    return run_steps(build_model_steps(preset, device, seed, random_weights, int8_kernel))


def build_model_steps(preset: str, device: str, seed: int = 0, random_weights: bool = False,
                      int8_kernel=None) -> Steps:
    """build_model in steps (engine.steps): the weights, then the CPU's plan for them."""
    cfg = get_preset(preset)
    model = LlamaModel(cfg)
    if cfg.weights == "trained" and not random_weights:
        path = checkpoint_path(cfg)
        if not path.exists():
            raise FileNotFoundError(f"checkpoint {path} is missing: train it with "
                                    f"`python -m engine.training --preset {cfg.name}`")
        load_checkpoint(model, path)
    else:
        model.init_random(seed)
    model.to(device=device, dtype=torch_dtype(cfg.dtype_name(device)))
    if int8_kernel is not None:
        model.quantize_int8(int8_kernel)
    yield "weights made"
    yield from model.prepare_for_inference_steps()
    return model


class LLMEngine:
    def __init__(self, config: EngineConfig | None = None, **overrides):
        config = config or EngineConfig()
        for key, value in overrides.items():
            setattr(config, key, value)
        run_steps(self._init_steps(config))

    @classmethod
    def build_steps(cls, config: EngineConfig) -> Steps[LLMEngine]:
        """An engine built in steps (engine.steps), for a caller that lets other work run
        between them (the lab's worker: a model's build takes tens of seconds on a CPU)."""
        engine = cls.__new__(cls)
        yield from engine._init_steps(config)
        return engine

    def _init_steps(self, config: EngineConfig) -> Steps[None]:
        self.config = config
        self.model_config = get_preset(config.preset)
        self.device = resolve_device(config.device)
        if self.device == "cpu":
            configure_threads()
        self.dtype = torch_dtype(self.model_config.dtype_name(self.device))
        self.backend = kv_backend(config, self.device, self.dtype)
        self.build_backend = self.backend  # the model's layer ops are chosen for it, once
        if config.weight_format not in WEIGHT_FORMATS:
            raise ConfigError(f"unknown weight format {config.weight_format!r}: choose one of "
                              f"{', '.join(WEIGHT_FORMATS)}")
        int8_kernel = (int8_kernel_for(self.device, self.dtype)
                       if config.weight_format == "int8" else None)
        self.tokenizer = Tokenizer()
        self.model = yield from build_model_steps(config.preset, self.device, config.seed,
                                                  config.random_weights, int8_kernel)
        self._build_kv_cache(config.kv_budget_bytes or default_budget(self.device))
        if self.backend == "cpp":  # the runner has checked that the library is built (float32)
            from .model.cpu_kernel import fused_layer_ops

            # The same library fuses each residual add with its norm, SwiGLU's three ops, and
            # a whole decode step into one call.
            self.model.use_fused_ops(fused_layer_ops())
        self._ids = itertools.count()
        self.plan_weighed = False
        yield from self._weigh_plan_steps()

    @property
    def path(self) -> str:
        """"fast" where this engine runs the way the lessons describe it (on a GPU; on the CPU,
        the C++ kernels with a plan weighed in the whole step), else "plain" (torch's own ops:
        before the app's set-up has built the kernels, or where they cannot be built). A result
        says which (engine.lab.setup_state), and the cache keeps each under its own key."""
        if self.device.startswith("cuda"):
            return "fast"
        return "fast" if self.backend == "cpp" and self.plan_weighed else "plain"

    def _weigh_plan_steps(self) -> Steps[None]:
        """On the CPU, the products' plan weighed in this engine's whole decode step
        (engine/model/step_plan.py), read from the machine's plans' file or timed there now
        and kept; where the pool cannot hold a 64-row batch the products' plan is used as it
        is (a later engine with a larger pool times it)."""
        linears = self.model.planned_linears()
        if self.device != "cpu":
            return
        if not linears:  # int8 weights: their kernel needs no plan
            self.plan_weighed = True
            return
        if linears[0].plan is None:
            return
        weights = [m.weight.detach() for m in linears]
        settled = step_plan(weights, self.backend)
        if settled is None:
            tuned = [linears[0].plan[rows - 1] for rows in TUNED_ROWS]
            extra = ("cpp",) if "cpp" in plan_key(weights)[0] else ()
            weighed = yield from settle_steps(tuned, extra, self.time_decode_steps)
            if weighed is None:
                return
            settled, seconds = weighed
            save_step_plan(weights, self.backend, settled, seconds)
            if broken(seconds):
                log.info("%s: the decode step at %s rows stays slower than at a larger batch "
                         "after timing it again", self.model_config.name, broken(seconds))
        self.model.use_plan(rows_plan(settled))
        self.plan_weighed = True

    def time_decode_steps(self, rows: int, variants: tuple[str, ...],
                          rounds: int = ROUNDS) -> dict[str, float] | None:
        """Each variant's best time, over `rounds` interleaved rounds, of this engine's whole
        decode step (LLMEngine.step: the batch's inputs, the model, the sampler) at `rows` rows
        with every product in that variant; the plan is restored after. None where the pool
        cannot hold `rows` sequences."""
        linears = self.model.planned_linears()
        kept = linears[0].plan
        seqs = [self.new_sequence([1 + i % 64], rounds * len(variants) + 1, ignore_eos=True)
                for i in range(rows)]
        times = dict.fromkeys(variants, float("inf"))
        try:
            if not all(self.reserve(seq, 1) for seq in seqs):
                return None
            self.step([], [(seq, 1) for seq in seqs])
            for _ in range(rounds):
                for variant in variants:
                    plan = list(kept)
                    plan[rows - 1] = variant
                    for m in linears:
                        if variant == "x_wt" and m.weight_t is None:
                            m.weight_t = split_transposed(m.weight.detach())
                        m.plan = plan
                    if not all(self.reserve(seq, 1) for seq in seqs):
                        return None
                    start = time.perf_counter()
                    self.step(seqs, [])
                    times[variant] = min(times[variant], time.perf_counter() - start)
        finally:
            for seq in seqs:
                self.release(seq)
            self.model.use_plan(kept)
        return times

    def _build_kv_cache(self, budget: int) -> None:
        """The paged KV pool for a byte budget, its block manager, and the runner over them."""
        config = self.config
        self.cache = PagedKVCache(
            self.model_config, budget, config.block_size, self.dtype, self.device,
            config.kv_dtype,
        )
        if self.cache.window and config.prefix_caching:
            raise ConfigError("prefix caching does not share sliding-window blocks: leave it "
                              "off for a hybrid model")
        self.blocks = BlockManager(self.cache.num_blocks, config.block_size,
                                   prefix_caching=config.prefix_caching, window=self.cache.window)
        # One block no sequence owns: padding rows (a fixed-size static batch's finished members,
        # CUDA-graph padding) write their throwaway K and V there.
        self.scratch_block = self.blocks.take_scratch_block()
        sample_vocab = min(self.tokenizer.vocab_size, self.model_config.vocab)
        self.runner = ModelRunner(self.model, self.cache, self.backend, self.device, sample_vocab,
                                  self.scratch_block)
        self.runner.batch_invariant = config.batch_invariant
        # An MoE step picks its experts from the data (engine/model/moe.py): no graph holds it.
        if (self.device.startswith("cuda") and self.backend == "triton" and config.cuda_graphs
                and not self.model_config.experts and not config.batch_invariant):
            self.use_decode_graphs(replay=True)
        self._warm = False

    def resize_kv_cache(self, budget_bytes: int) -> None:
        """Replace the paged KV pool with one of budget_bytes (the old pool is freed first, so
        the two never sit in memory together). No sequence may hold blocks; the next warm_up
        runs again."""
        if self.blocks.num_used:
            raise RuntimeError("cannot resize the KV cache while sequences hold blocks")
        self.cache = self.blocks = self.runner = None
        self.config.kv_budget_bytes = budget_bytes
        self._build_kv_cache(budget_bytes)

    def set_kv_dtype(self, kv_dtype: str) -> None:
        """Serve the same model with another KV format ("auto" or "fp8"): the pool is rebuilt
        for the same budget and the attention backend follows the format (kv_backend). No
        sequence may hold blocks."""
        previous = self.config.kv_dtype
        self.config.kv_dtype = kv_dtype
        try:
            backend = kv_backend(self.config, self.device, self.dtype)
        except ConfigError:
            self.config.kv_dtype = previous
            raise
        if backend == "cpp" and self.build_backend != "cpp":
            backend = "torch"  # the model's C++ layer ops were not installed at build time
        self.backend = backend
        self.resize_kv_cache(self.config.kv_budget_bytes or self.cache.allocated_bytes)

    def warm_up(self) -> None:
        """Run a short prefill and a few decode steps once, so that first-call costs (thread
        pools, allocator growth, kernel compilation) never land in a measurement."""
        if self._warm:
            return
        seq = self.new_sequence([1] * 8, 4, ignore_eos=True)
        try:
            self.reserve(seq, seq.num_uncomputed)
            self.step([], [(seq, seq.num_uncomputed)])
            while not seq.finished:
                self.reserve(seq, 1)
                self.step([seq], [])
        finally:
            self.release(seq)
        self._warm = True

    def use_decode_graphs(self, replay: bool = True) -> None:
        """Run decode steps through static buffers (CUDA graphs when replay is True); padding
        rows write into the scratch block."""
        from .model.cuda_graphs import DecodeGraphs

        self.runner.graphs = DecodeGraphs(
            self.model, self.runner.attention, self.scratch_block, self.device, replay=replay
        )

    # ---- sequences -------------------------------------------------------------------------
    def new_sequence(self, prompt_ids: list[int], max_new_tokens: int,
                     sampling: SamplingParams | None = None, ignore_eos: bool = False,
                     seq_id: int | None = None) -> Sequence:
        """A sequence ready to be scheduled; its prompt must fit the model's context."""
        limit = self.model_config.context
        if not prompt_ids:
            raise ConfigError("the prompt is empty: give at least one token")
        if len(prompt_ids) + max_new_tokens > limit:
            raise ConfigError(
                f"prompt of {len(prompt_ids)} tokens plus {max_new_tokens} new tokens exceeds "
                f"the {self.model_config.name} context of {limit} positions"
            )
        sampling = sampling or SamplingParams()
        sampling.validate()
        return Sequence(
            id=next(self._ids) if seq_id is None else seq_id,
            prompt_ids=list(prompt_ids), max_new_tokens=max_new_tokens,
            sampling=sampling, ignore_eos=ignore_eos,
        )

    def blocks_per_sequence(self, tokens: int, prefill: int | None = None,
                            chunk: int = 0) -> int:
        """The most blocks one sequence whose cache grows to `tokens` positions holds at once,
        its first `prefill` of them (default all: a recompute) prefilled in chunks of `chunk`
        (0: whole), the rest decoded: one table's worth, or for a hybrid model its full table
        and the window blocks each step holds (block_manager.peak_blocks). Every place that
        sizes a request's KV asks here."""
        return peak_blocks(tokens, self.cache.block_size, self.cache.window, prefill, chunk)

    def check_fits(self, batch: int, tokens_each: int, prefill: int | None = None) -> None:
        """Refuse, naming the limit, a batch whose KV cache cannot fit in the budget (each
        member's first `prefill` tokens prefilled whole, then decoded: blocks_per_sequence)."""
        each = self.blocks_per_sequence(tokens_each, prefill)
        needed = batch * each
        if needed > self.cache.num_blocks:
            fit = self.cache.num_blocks // each
            raise ConfigError(
                f"batch of {batch} x {tokens_each} tokens needs {needed} KV blocks but the KV "
                f"budget of {self.cache.allocated_bytes / 2**20:.0f} MiB holds "
                f"{self.cache.num_blocks}: at most {fit} sequences of that length fit"
            )

    def is_finished(self, seq: Sequence) -> bool:
        if seq.done:
            return True
        eos = self.tokenizer.eos_id
        return not seq.ignore_eos and bool(seq.output_ids) and seq.output_ids[-1] == eos

    # ---- running -----------------------------------------------------------------------------
    def step(self, decode: list[Sequence], prefill: list[tuple[Sequence, int]],
             padding: int = 0) -> dict[int, int]:
        """Run one step; blocks for the new tokens must already be allocated (see `reserve`).
        `padding` adds dummy decode rows, computed and thrown away (a fixed-size batch's empty
        slots). Appends each new token to its sequence and returns {sequence id: token}. Returns
        only after the device has finished, so a clock read next times finished work."""
        tokens = self.runner.step(decode, prefill, padding)
        self.synchronize()
        for seq in itertools.chain(decode, (s for s, _ in prefill)):
            if seq.id in tokens:
                seq.output_ids.append(tokens[seq.id])
                seq.finished = self.is_finished(seq)
            self.blocks.cache_full_blocks(seq)
        return tokens

    def verify(self, seqs: list[Sequence], drafts: list[list[int]]) -> list[list[int]]:
        """A speculative verify step (speculative.py): each sequence's last token and its draft
        tokens run in one step; returns the greedy choice after each of them (len(draft) + 1
        tokens per sequence). Blocks must be reserved for them; what is accepted, and so
        num_computed, is the caller's to settle."""
        logits = self.runner.verify(seqs, drafts)
        self.synchronize()
        return [rows.argmax(-1).tolist() for rows in logits]

    def reserve(self, seq: Sequence, new_tokens: int, cached: int = 0) -> bool:
        """Allocate blocks so seq can run new_tokens more tokens; False if the pool is short.
        `cached` (a sequence starting from nothing, with prefix caching: the count from
        blocks.cached_prefix) takes that many leading tokens from the prefix cache first, and
        new_tokens count from there."""
        if not self.blocks.can_grow(seq, new_tokens, cached):
            return False
        self.blocks.grow(seq, new_tokens, cached)
        return True

    def release(self, seq: Sequence) -> None:
        self.blocks.free(seq)

    def synchronize(self) -> None:
        synchronize(self.device)
