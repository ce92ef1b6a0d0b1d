"""Speculative decoding with greedy acceptance.

A cheap draft proposes k tokens for each sequence; the target model checks them all in ONE step
(LLMEngine.verify: the sequence's last token and its k draft tokens run as k + 1 rows over the
paged cache, with logits at every row). The longest prefix of the draft that agrees with the
target's own greedy choices is accepted, plus one token of the target's (its correction at the
first disagreement, or a bonus token after a full match). So each target step yields 1 to k + 1
tokens per sequence, and the text is exactly what plain greedy decoding writes. The K and V of
rejected positions are rolled back: num_computed stops after the accepted tokens and the blocks
past it go back to the pool (their stale entries are overwritten later).

Two drafts:
- NgramDraft, prompt lookup (as vLLM's `ngram` method): find the sequence's last n tokens earlier
  in its own prompt and output, and propose what followed them there. No second model: it wins
  on text that repeats itself (code edits, quoting, a model stuck in a loop).
- ModelDraft: a small model trained like the target on the same corpus and tokenizer (the `draft`
  preset), with its own engine and paged cache, which it rolls back the same way.

If each draft token were accepted independently with probability a, a step would yield
(1 - a^(k+1)) / (1 - a) tokens on average (Leviathan et al., 2023); SpecStats estimates a from
the run and reports the formula beside the measured tokens per step (also averaged over the
rounds as they were, since a round may propose fewer than k tokens).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Protocol

from .config import EngineConfig, get_preset
from .errors import ConfigError
from .llm_engine import LLMEngine
from .sequence import Sequence
from .steps import Steps, run_steps

METHODS = ("ngram", "draft")
MAX_K = 16


def expected_tokens_per_step(a: float, k: int) -> float:
    """(1 - a^(k+1)) / (1 - a): tokens a verify step yields when each of k draft tokens is
    accepted independently with probability a (k + 1 when a = 1)."""
    return float(k + 1) if a >= 1.0 else (1.0 - a ** (k + 1)) / (1.0 - a)


def accepted_length(draft: list[int], target: list[int]) -> int:
    """Greedy acceptance: how many leading draft tokens equal the target's choices."""
    n = 0
    while n < len(draft) and draft[n] == target[n]:
        n += 1
    return n


@dataclass
class SpecStats:
    """Counts over a run. A round is one sequence in one verify step; each yields `accepted`
    draft tokens plus one of the target's. A rejection is a round that refused a draft token
    (so accepted / (accepted + rejections) estimates the per-token acceptance probability a,
    which the formula takes, while accepted / proposed is the share of draft tokens kept)."""

    k: int = 0
    steps: int = 0  # target verify steps
    rounds: int = 0
    proposed: int = 0
    accepted: int = 0
    rejections: int = 0
    tokens: int = 0  # tokens the verify steps appended (fewer at end-of-text or the limit)
    draft_s: float = 0.0  # time spent proposing
    verify_s: float = 0.0  # time spent in target verify steps
    # rounds by how many tokens were proposed (fewer than k near the length limit, or when
    # prompt lookup finds no match)
    proposal_lengths: dict[int, int] = field(default_factory=dict)

    @property
    def acceptance_rate(self) -> float | None:
        return self.accepted / self.proposed if self.proposed else None

    @property
    def alpha(self) -> float | None:
        checked = self.accepted + self.rejections
        return self.accepted / checked if checked else None

    @property
    def tokens_per_round(self) -> float | None:
        return self.tokens / self.rounds if self.rounds else None

    def expected_tokens(self, k: int | None = None) -> float | None:
        """The formula at the estimated a: for k draft tokens every round, or (k None) averaged
        over the rounds as they were, each with the number of tokens it proposed."""
        a = self.alpha
        if a is None or not self.rounds:
            return None
        if k is not None:
            return expected_tokens_per_step(a, k)
        return sum(n * expected_tokens_per_step(a, length)
                   for length, n in self.proposal_lengths.items()) / self.rounds

    def to_json(self) -> dict:
        out = asdict(self)
        out["proposal_lengths"] = {str(k): n for k, n in sorted(self.proposal_lengths.items())}
        return {
            **out,
            "acceptance_rate": self.acceptance_rate,
            "alpha": self.alpha,
            "tokens_per_step": self.tokens_per_round,
            "expected_tokens_per_step": self.expected_tokens(),
            "expected_tokens_per_step_at_k": self.expected_tokens(self.k),
        }


class Draft(Protocol):
    """What proposes tokens: propose for sequences (with at most ks[i] tokens each), catch up
    after the target verified, forget a sequence that ended."""

    def propose(self, seqs: list[Sequence], ks: list[int]) -> list[list[int]]: ...

    def catch_up(self, seqs: list[Sequence]) -> None: ...

    def release(self, seq: Sequence) -> None: ...


def ngram_lookup(tokens: list[int], k: int, max_n: int = 3, min_n: int = 1) -> list[int]:
    """Prompt lookup: for n from max_n down to min_n, find the last n tokens earlier in the
    sequence (the most recent occurrence) and return up to k tokens that followed it; [] if no
    n-gram recurs."""
    if k <= 0:
        return []
    for n in range(min(max_n, len(tokens) - 1), min_n - 1, -1):
        suffix = tokens[-n:]
        for start in range(len(tokens) - n - 1, -1, -1):
            if tokens[start:start + n] == suffix:
                return tokens[start + n:start + n + k]
    return []


class NgramDraft:
    """Proposals looked up in the sequence's own tokens (no model, no cache of its own)."""

    def __init__(self, max_n: int = 3, min_n: int = 1):
        self.max_n, self.min_n = max_n, min_n

    def propose(self, seqs: list[Sequence], ks: list[int]) -> list[list[int]]:
        return [ngram_lookup(s.token_ids, k, self.max_n, self.min_n) for s, k in zip(seqs, ks)]

    def catch_up(self, seqs: list[Sequence]) -> None:
        pass

    def release(self, seq: Sequence) -> None:
        pass


class ModelDraft:
    """A small model proposing greedily, k decode steps per round, batched over the sequences,
    on an engine and paged cache of its own. Each target sequence has a mirror sequence here;
    after a verify the mirror takes the target's tokens and rolls its cache back to where the
    two agree."""

    def __init__(self, engine: LLMEngine):
        self.engine = engine
        self.mirrors: dict[int, Sequence] = {}

    @classmethod
    def for_target(cls, target: LLMEngine, preset: str = "draft") -> ModelDraft:
        """The draft preset on the target's device, with room for as many tokens as the
        target's KV cache."""
        return run_steps(cls.build_steps(target, preset))

    @classmethod
    def build_steps(cls, target: LLMEngine, preset: str = "draft") -> Steps[ModelDraft]:
        """for_target in steps (engine.steps): the lab's worker builds the draft model before
        the job's work and lets other readers' short jobs run between the steps."""
        cfg = get_preset(preset)
        if cfg.vocab < target.tokenizer.vocab_size:
            raise ConfigError(f"draft {preset} knows {cfg.vocab} tokens, fewer than the "
                              f"target's tokenizer ({target.tokenizer.vocab_size})")
        per_token = cfg.kv_bytes_per_token(target.dtype.itemsize)
        budget = (target.cache.num_blocks + 1) * target.cache.block_size * per_token
        engine = yield from LLMEngine.build_steps(EngineConfig(
            preset=preset, device=target.device, backend=target.backend,
            block_size=target.cache.block_size, kv_budget_bytes=budget, cuda_graphs=False,
        ))
        return cls(engine)

    def _mirror(self, seq: Sequence) -> Sequence:
        mirror = self.mirrors.get(seq.id)
        if mirror is None:  # its length is bounded by the target's, never by its own limit
            mirror = Sequence(id=seq.id, prompt_ids=list(seq.prompt_ids),
                              max_new_tokens=2**62, ignore_eos=True,
                              output_ids=list(seq.output_ids))
            self.mirrors[seq.id] = mirror
        return mirror

    def propose(self, seqs: list[Sequence], ks: list[int]) -> list[list[int]]:
        mirrors = [self._mirror(s) for s in seqs]
        drafts: list[list[int]] = [[] for _ in seqs]
        for _ in range(max(ks, default=0)):
            decode, prefill = [], []
            for mirror, k, draft in zip(mirrors, ks, drafts):
                if len(draft) >= k:
                    continue
                n = mirror.num_uncomputed  # 1, or more to catch up (first round, full accept)
                if not self.engine.reserve(mirror, n):
                    raise MemoryError("the draft model's KV cache is full")
                if n == 1:
                    decode.append(mirror)
                else:
                    prefill.append((mirror, n))
            tokens = self.engine.step(decode, prefill)
            for mirror, draft in zip(mirrors, drafts):
                if mirror.id in tokens:
                    draft.append(tokens[mirror.id])
        return drafts

    def catch_up(self, seqs: list[Sequence]) -> None:
        for seq in seqs:
            mirror = self._mirror(seq)
            mine, theirs = mirror.output_ids, seq.output_ids
            same = 0
            while same < min(len(mine), len(theirs)) and mine[same] == theirs[same]:
                same += 1
            mirror.output_ids = list(theirs)
            mirror.num_computed = min(mirror.num_computed, len(mirror.prompt_ids) + same)
            self.engine.blocks.trim(mirror)

    def release(self, seq: Sequence) -> None:
        mirror = self.mirrors.pop(seq.id, None)
        if mirror is not None:
            self.engine.release(mirror)


def make_draft(method: str, target: LLMEngine) -> Draft:
    if method == "ngram":
        return NgramDraft()
    if method == "draft":
        return ModelDraft.for_target(target)
    raise ConfigError(f"unknown speculative method {method!r}: choose one of {', '.join(METHODS)}")


class SpeculativeDecoder:
    """Decode steps that verify a draft's proposals: `step(seqs)` replaces one plain decode
    step for sequences whose next token is pending, and returns {sequence id: new tokens}."""

    def __init__(self, engine: LLMEngine, draft: Draft, k: int):
        if not 1 <= k <= MAX_K:
            raise ConfigError(f"speculative k must be 1 to {MAX_K} draft tokens (got {k})")
        self.engine, self.draft, self.k = engine, draft, k
        self.stats = SpecStats(k=k)

    def step(self, seqs: list[Sequence]) -> dict[int, list[int]]:
        engine, stats = self.engine, self.stats
        if any(not s.sampling.greedy for s in seqs):
            raise ConfigError("speculative decoding here accepts greedily: temperature must be 0")
        # never propose past the sequence's last token: k + 1 tokens may come out of one step
        ks = [max(0, min(self.k, s.max_new_tokens - len(s.output_ids) - 1)) for s in seqs]
        began = time.perf_counter()
        drafts = self.draft.propose(seqs, ks)
        proposed = time.perf_counter()
        for seq, draft in zip(seqs, drafts):
            if not engine.reserve(seq, 1 + len(draft)):
                raise MemoryError(f"no KV blocks left to verify sequence {seq.id}")
        choices = engine.verify(seqs, drafts)
        out: dict[int, list[int]] = {}
        for seq, draft, target in zip(seqs, drafts, choices):
            accepted = accepted_length(draft, target)
            new: list[int] = []
            for token in draft[:accepted] + [target[accepted]]:
                seq.output_ids.append(token)
                new.append(token)
                seq.finished = engine.is_finished(seq)
                if seq.finished:
                    break
            # K and V are valid up to the last accepted token; the newest token is pending
            seq.num_computed = seq.num_tokens - 1
            engine.blocks.trim(seq)
            engine.blocks.cache_full_blocks(seq)
            out[seq.id] = new
            stats.rounds += 1
            stats.proposed += len(draft)
            stats.accepted += accepted
            stats.rejections += accepted < len(draft)
            stats.tokens += len(new)
            stats.proposal_lengths[len(draft)] = stats.proposal_lengths.get(len(draft), 0) + 1
        self.draft.catch_up(seqs)
        stats.steps += 1
        stats.draft_s += proposed - began
        stats.verify_s += time.perf_counter() - proposed
        return out

    def release(self, seq: Sequence) -> None:
        self.draft.release(seq)
