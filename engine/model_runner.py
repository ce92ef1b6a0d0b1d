"""Executes one step: builds the flattened batch, runs the model over the paged cache, samples.

The scheduler decides which sequences decode and which prefill how many tokens; the runner only
carries that out. All the per-step index arithmetic (positions, slot mapping, block tables,
sequence lengths) lives in `build_batch`, in one place.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from .errors import ConfigError
from .model.attention import AttentionBatch, PagedAttention, PrefillChunk
from .model.batch_invariant import row_by_row_logits
from .model.kv_cache import PagedKVCache
from .model.model import LlamaModel
from .model.window import build_window_batch
from .sampler import sample
from .sequence import Sequence


@dataclass
class StepInputs:
    input_ids: torch.Tensor  # (T,)
    positions: torch.Tensor  # (T,)
    attention: AttentionBatch
    sample_rows: list[int]  # rows of the batch whose logits give a new token
    sample_seqs: list[Sequence]


NUMPY_INTS = {torch.int64: np.int64, torch.int32: np.int32}


def index_tensor(values: list, dtype: torch.dtype, device: str) -> torch.Tensor:
    """A step's index tensor (token ids, positions, slots, block tables, lengths) from Python
    ints. On the CPU through numpy, which makes no torch op call: torch.tensor() makes a few,
    each a few microseconds, and a step builds five such tensors."""
    if device == "cpu":
        return torch.from_numpy(np.array(values, dtype=NUMPY_INTS[dtype]))
    return torch.tensor(values, dtype=dtype, device=device)


def build_batch(decode: list[Sequence], prefill: list[tuple[Sequence, int]],
                block_size: int, device: str, padding: int = 0,
                scratch_block: int | None = None) -> StepInputs:
    """Flatten one step: each decoding sequence's next token, then `padding` rows that decode a
    dummy token into the scratch block (computed in full, never sampled: the wasted rows of a
    fixed-size batch), then each prefill chunk."""
    ids: list[int] = []
    positions: list[int] = []
    slots: list[int] = []
    sample_rows: list[int] = []
    sample_seqs: list[Sequence] = []

    def add_tokens(seq: Sequence, count: int) -> None:
        start = seq.num_computed
        table = seq.block_table
        ids.extend(seq.token_slice(start, start + count))
        positions.extend(range(start, start + count))
        slots.extend(table[pos // block_size] * block_size + pos % block_size
                     for pos in range(start, start + count))
        if start + count == seq.num_tokens:  # the chunk reaches the end: it yields a token
            sample_rows.append(len(ids) - 1)
            sample_seqs.append(seq)

    for seq in decode:
        assert seq.num_uncomputed == 1, "a decoding sequence runs exactly one new token"
        add_tokens(seq, 1)
    decode_lens = [seq.num_computed + 1 for seq in decode]
    tables = [seq.block_table for seq in decode]
    if padding:
        if scratch_block is None:
            raise ValueError("padding rows need a scratch block to write into")
        ids.extend([0] * padding)
        positions.extend([0] * padding)
        slots.extend([scratch_block * block_size] * padding)
        decode_lens.extend([1] * padding)
        tables.extend([[scratch_block]] * padding)
    chunks = []
    for seq, count in prefill:
        chunks.append(PrefillChunk(
            token_offset=len(ids), start=seq.num_computed, length=count,
            block_table=index_tensor(seq.block_table, torch.int64, device),
        ))
        add_tokens(seq, count)

    attention = decode_attention_batch(slots, tables, decode_lens, chunks, device)
    return StepInputs(
        input_ids=index_tensor(ids, torch.int64, device),
        positions=index_tensor(positions, torch.int64, device),
        attention=attention,
        sample_rows=sample_rows,
        sample_seqs=sample_seqs,
    )


def decode_attention_batch(slots: list[int], tables: list[list[int]], decode_lens: list[int],
                           chunks: list[PrefillChunk], device: str) -> AttentionBatch:
    """The attention inputs of a step whose first rows decode (one query each, over its block
    table and context length) and whose other rows are prefill chunks."""
    decode_tables = None
    if tables:
        width = max(len(t) for t in tables)
        decode_tables = index_tensor([t + [0] * (width - len(t)) for t in tables], torch.int64,
                                     device)
    return AttentionBatch(
        slot_mapping=index_tensor(slots, torch.int64, device),
        num_decode=len(tables),
        decode_block_tables=decode_tables,
        decode_seq_lens=index_tensor(decode_lens, torch.int32, device)
        if tables else None,
        decode_max_len=max(decode_lens, default=0),
        decode_lens=decode_lens,
        prefills=chunks,
    )


def build_verify_batch(seqs: list[Sequence], drafts: list[list[int]], block_size: int,
                       device: str) -> StepInputs:
    """Flatten a speculative verify step: each sequence's last token and then its draft tokens,
    at their positions, every one of them a row whose logits are kept. Each row is a decode
    query over the context up to and including itself (the K and V of the whole step are
    written before attention reads), so the rows of one sequence attend causally, exactly as
    plain decoding would at those positions."""
    ids: list[int] = []
    positions: list[int] = []
    slots: list[int] = []
    tables: list[list[int]] = []
    lens: list[int] = []
    for seq, draft in zip(seqs, drafts, strict=True):
        assert seq.num_uncomputed == 1, "a verified sequence has exactly its last token to run"
        for i, token in enumerate([seq.token_ids[-1], *draft]):
            pos = seq.num_computed + i
            ids.append(token)
            positions.append(pos)
            slots.append(seq.block_table[pos // block_size] * block_size + pos % block_size)
            tables.append(seq.block_table)
            lens.append(pos + 1)
    return StepInputs(
        input_ids=index_tensor(ids, torch.int64, device),
        positions=index_tensor(positions, torch.int64, device),
        attention=decode_attention_batch(slots, tables, lens, [], device),
        sample_rows=list(range(len(ids))),
        sample_seqs=list(seqs),
    )


def _is_all_rows(rows: list[int], count: int) -> bool:
    return len(rows) == count and rows[-1] == count - 1


class ModelRunner:
    """Owns the model and its paged cache on one device, and runs steps over them."""

    def __init__(self, model: LlamaModel, cache: PagedKVCache, backend: str, device: str,
                 sample_vocab: int | None = None, scratch_block: int | None = None):
        self.model = model
        self.scratch_block = scratch_block  # owned by no sequence: where padding rows write
        self.cache = cache
        self.device = device
        self.attention = PagedAttention(cache, backend)
        # Random-weight presets have a larger vocabulary than the shared tokenizer can spell;
        # sampling is limited to the ids it knows (engines pad vocabularies the same way).
        if sample_vocab is not None and sample_vocab >= model.cfg.vocab:
            sample_vocab = None  # nothing to cut (no slice op per step)
        self.sample_vocab = sample_vocab
        self.last_logits: dict[int, torch.Tensor] = {}  # {sequence id: logits} of the last step
        self.graphs = None  # a DecodeGraphs, set by the engine on CUDA with the Triton backend
        self.batch_invariant = False  # each row alone (model/batch_invariant.py): EngineConfig

    @torch.inference_mode()
    def step(self, decode: list[Sequence], prefill: list[tuple[Sequence, int]],
             padding: int = 0) -> dict[int, int]:
        """Run one step (with `padding` dummy decode rows); returns {sequence id: new token} for
        sequences that produced one. Updates each sequence's count of cached tokens; appending
        tokens is the caller's."""
        inputs = build_batch(decode, prefill, self.cache.block_size, self.device, padding,
                             self.scratch_block)
        if self.cache.window:  # a hybrid model: its window layers' slots and tables
            inputs.attention.window = build_window_batch(
                decode, prefill, self.cache.block_size, self.device, self.cache.window, padding,
                self.scratch_block)
        tokens: dict[int, int] = {}
        if inputs.sample_rows:
            logits = self._logits(inputs)
            if self.sample_vocab is not None:
                logits = logits[:, : self.sample_vocab]
            new = sample(logits, [seq.sampling for seq in inputs.sample_seqs])
            tokens = {seq.id: tok for seq, tok in zip(inputs.sample_seqs, new)}
            self.last_logits = {seq.id: row for seq, row in zip(inputs.sample_seqs, logits)}
        elif self.batch_invariant:  # prefill chunks that end mid-prompt, one row at a time
            self._model_logits(inputs, [])
        else:  # prefill chunks that end mid-prompt: fill the cache, sample nothing
            self.attention.batch = inputs.attention
            self.model(inputs.input_ids, inputs.positions, self.attention)
        for seq in decode:
            seq.num_computed += 1
        for seq, count in prefill:
            seq.num_computed += count
        return tokens

    @torch.inference_mode()
    def verify(self, seqs: list[Sequence], drafts: list[list[int]]) -> list[torch.Tensor]:
        """Run a speculative verify step (see build_verify_batch): for each sequence, logits
        (len(draft) + 1, vocab) at its last token and at each draft token. Writes their K and V
        (blocks must be reserved); leaves num_computed to the caller, who knows what was
        accepted."""
        if self.cache.window:
            raise ConfigError("speculative decoding does not verify sliding-window layers")
        inputs = build_verify_batch(seqs, drafts, self.cache.block_size, self.device)
        logits = self._model_logits(inputs)
        if self.sample_vocab is not None:
            logits = logits[:, : self.sample_vocab]
        return list(logits.split([len(d) + 1 for d in drafts]))

    def _logits(self, inputs: StepInputs) -> torch.Tensor:
        """Logits of the rows that sample, from a CUDA graph when the step allows it."""
        if self.graphs is not None and not self.batch_invariant:
            logits = self.graphs.run(inputs.input_ids, inputs.positions, inputs.attention)
            if logits is not None:
                if not _is_all_rows(inputs.sample_rows, logits.shape[0]):
                    logits = logits[inputs.sample_rows]
                return logits
        all_rows = _is_all_rows(inputs.sample_rows, inputs.input_ids.shape[0])
        return self._model_logits(inputs, None if all_rows else inputs.sample_rows)

    def _model_logits(self, inputs: StepInputs, rows: list[int] | None = None) -> torch.Tensor:
        """Logits (float32) at `rows` of the step (every row where None): a decode-only step in
        one C++ call where the model can (LlamaModel.decode_logits), else its forward pass, then
        the output projection of just those rows; in batch-invariant mode, each row alone."""
        if self.batch_invariant:
            return row_by_row_logits(self.model, self.cache, inputs.input_ids, inputs.positions,
                                     inputs.attention, rows)
        self.attention.batch = inputs.attention
        logits = self.model.decode_logits(inputs.input_ids, inputs.positions, self.attention)
        if logits is not None:
            return logits if rows is None else logits[rows]
        hidden = self.model(inputs.input_ids, inputs.positions, self.attention)
        return self.model.logits(hidden if rows is None else hidden[rows])
