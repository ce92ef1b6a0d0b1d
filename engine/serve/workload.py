"""Seeded workloads: requests with prompts, forced output lengths and arrival times.

A workload depends only on its spec and seed, never on the policy that serves it, so one seed
gives the same requests at the same times under every policy and runs compare.

- poisson: exponential gaps of mean 1/rate (rate inf: all arrive at t = 0).
- gamma: gamma-distributed gaps with shape K = burstiness and mean 1/rate, so their coefficient of
  variation is 1/sqrt(K): K < 1 is burstier than Poisson, K = 1 is Poisson, K > 1 is smoother
  (vLLM's --burstiness).
- fixed: a closed loop of `concurrency` users. The first `concurrency` requests arrive at t = 0;
  every later one has arrival_s None and is released by the serving loop when a request
  finishes, so exactly `concurrency` are outstanding until the list runs out.
- interference: `requests` requests at t = 0 plus one request with a long prompt arriving at
  long_at_s (the stall of lesson 7); its output length is drawn like the others'.

In the open-loop kinds the first request arrives at t = 0 and each later one after a drawn gap
(as vLLM's benchmark sends its first request at once). With ramp_up_s, poisson and gamma
arrivals come at a rate that climbs linearly from 0 to `rate` over that many seconds
(`ramp_up`), the same draws on a stretched clock. Prompt and output lengths are uniform
integers in [A, B], or with `lengths` drawn from a bundled distribution (serve/lengths.py);
with shared_prefix_len N, every prompt starts with the same N tokens (a shared system prompt,
what prefix caching reuses) followed by its own tokens. Prompt tokens are real text: slices of
the training corpus at seeded offsets, tokenized (the tiny model continues text it knows);
without a tokenizer or corpus they are seeded random token ids.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from ..config import ASSETS, WORKLOADS
from ..errors import ConfigError
from ..sampler import SamplingParams
from .lengths import load_lengths

CORPUS_FILE = ASSETS / "corpus" / "corpus.txt"
EOS_TEXT = "<|endoftext|>"


@dataclass
class Request:
    """One request to serve. arrival_s is seconds from the run's start; None means closed loop:
    it arrives when an earlier request finishes. output_len is forced (end-of-text ignored)
    unless stop_at_eos is set."""

    id: int
    prompt_ids: list[int]
    output_len: int
    arrival_s: float | None = 0.0
    stop_at_eos: bool = False
    sampling: SamplingParams | None = None  # None: greedy
    traffic_class: str | None = None  # its lane under traffic classes (engine/traffic.py)
    tenant: str | None = None  # whose quota it draws on
    # The prompt as text, where it has one that the tokenizer turns back into exactly
    # prompt_ids: a run tokenizes it when the request arrives (the tokenize phase).
    prompt_text: str | None = None


@dataclass
class WorkloadSpec:
    kind: str = "poisson"
    requests: int = 32
    rate: float = math.inf  # requests per second (poisson, gamma)
    burstiness: float = 1.0  # gamma shape K
    concurrency: int = 4  # fixed
    prompt_len: tuple[int, int] = (32, 256)
    output_len: tuple[int, int] = (16, 128)
    long_prompt_len: int = 1536  # interference
    long_at_s: float = 0.2  # interference
    seed: int = 0
    shared_prefix_len: int = 0  # tokens every prompt starts with (a shared system prompt)
    ramp_up_s: float = 0.0  # poisson, gamma: the rate climbs from 0 over this many seconds
    lengths: str | None = None  # a bundled length distribution (serve/lengths.py) instead

    def validate(self) -> None:
        if self.kind not in WORKLOADS:
            raise ConfigError(f"unknown workload {self.kind!r}: choose one of {', '.join(WORKLOADS)}")
        if self.requests < 1:
            raise ConfigError(f"requests must be at least 1 (got {self.requests})")
        if not self.rate > 0:
            raise ConfigError(f"rate must be more than 0 requests/s, or inf (got {self.rate})")
        if not (self.burstiness > 0 and math.isfinite(self.burstiness)):
            raise ConfigError(f"burstiness must be a finite number above 0 (got {self.burstiness})")
        if self.concurrency < 1:
            raise ConfigError(f"concurrency must be at least 1 (got {self.concurrency})")
        for what, (low, high) in (("prompt length", self.prompt_len),
                                  ("output length", self.output_len)):
            if not 1 <= low <= high:
                raise ConfigError(f"{what} range {low}:{high} must satisfy 1 <= A <= B")
        if self.long_prompt_len < 1:
            raise ConfigError(f"long prompt length must be at least 1 (got {self.long_prompt_len})")
        if not (self.long_at_s >= 0 and math.isfinite(self.long_at_s)):
            raise ConfigError(f"long-at must be 0 s or more (got {self.long_at_s})")
        if self.shared_prefix_len < 0:
            raise ConfigError(f"shared prefix length must be 0 or more (got "
                              f"{self.shared_prefix_len})")
        if self.lengths is not None:
            load_lengths(self.lengths)
        if not (self.ramp_up_s >= 0 and math.isfinite(self.ramp_up_s)):
            raise ConfigError(f"ramp-up must be 0 s or more (got {self.ramp_up_s})")
        if self.ramp_up_s and (self.kind not in ("poisson", "gamma") or math.isinf(self.rate)):
            raise ConfigError("ramp-up needs arrivals at a finite rate: the poisson or gamma "
                              "workload with --rate below inf")

    @property
    def longest_output(self) -> int:
        """The most output tokens any request of this workload can ask for."""
        if self.lengths is not None:
            return load_lengths(self.lengths).output.high
        return self.output_len[1]

    @property
    def longest_prompt(self) -> int:
        """The most prompt tokens any request of this workload can have."""
        longest = self.prompt_len[1]
        if self.lengths is not None:
            longest = load_lengths(self.lengths).input.high
        if self.kind == "interference":
            longest = max(longest, self.long_prompt_len)
        return self.shared_prefix_len + longest

    def to_json(self) -> dict:
        out = asdict(self)
        for name in ("shared_prefix_len", "ramp_up_s", "lengths"):  # absent when unused:
            if not out[name]:  # earlier runs' JSON stays as it was
                del out[name]
        out["rate"] = "inf" if math.isinf(self.rate) else self.rate
        out["prompt_len"] = list(self.prompt_len)
        out["output_len"] = list(self.output_len)
        return out


# ---- arrival processes -------------------------------------------------------------------
def poisson_arrivals(n: int, rate: float, rng: np.random.Generator) -> list[float]:
    """n arrival times: 0, then exponential gaps of mean 1/rate; all 0 when rate is inf."""
    if math.isinf(rate):
        return [0.0] * n
    gaps = rng.exponential(1.0 / rate, size=n - 1)
    return [0.0] + np.cumsum(gaps).tolist()


def gamma_arrivals(n: int, rate: float, burstiness: float,
                   rng: np.random.Generator) -> list[float]:
    """n arrival times: 0, then gamma gaps with shape burstiness and mean 1/rate (coefficient of
    variation 1/sqrt(burstiness)); all 0 when rate is inf."""
    if math.isinf(rate):
        return [0.0] * n
    gaps = rng.gamma(shape=burstiness, scale=1.0 / (rate * burstiness), size=n - 1)
    return [0.0] + np.cumsum(gaps).tolist()


def ramp_up(arrivals: list[float], ramp_s: float) -> list[float]:
    """Arrival times at a rate that climbs linearly from 0 to the full rate R over ramp_s
    seconds, then stays at R: the same process on a stretched clock. The expected arrivals by
    time t are R t^2 / (2 ramp_s) during the ramp and R (t - ramp_s / 2) after it, so an arrival
    at u at the full rate moves to sqrt(2 ramp_s u) when u < ramp_s / 2, else to u + ramp_s / 2
    (a Poisson process stays a Poisson process, now of the ramped rate)."""
    if ramp_s <= 0:
        return list(arrivals)
    half = ramp_s / 2
    return [math.sqrt(2 * ramp_s * u) if u < half else u + half for u in arrivals]


# ---- prompts -----------------------------------------------------------------------------
_corpus_cache: dict[Path, str] = {}


def _corpus(path: Path) -> str | None:
    if path not in _corpus_cache:
        if not path.exists():
            return None
        _corpus_cache[path] = path.read_text(encoding="utf-8").replace(EOS_TEXT, "\n\n")
    return _corpus_cache[path]


class PromptSource:
    """Prompts of exact token lengths: tokenized corpus slices at seeded offsets, or seeded random
    ids in [0, vocab) when there is no tokenizer or no corpus."""

    def __init__(self, tokenizer=None, vocab: int = 4096, corpus: Path = CORPUS_FILE):
        self.tokenizer = tokenizer
        self.vocab = tokenizer.vocab_size if tokenizer is not None else vocab
        self.text = _corpus(corpus) if tokenizer is not None else None

    def text_of(self, ids: list[int]) -> str | None:
        """The text ids spell, if the tokenizer turns it back into exactly those ids (a slice
        cut inside a word may not); else None."""
        text = self.tokenizer.decode(ids)
        return text if self.tokenizer.encode(text) == ids else None

    def prompt(self, length: int, rng: np.random.Generator) -> list[int]:
        if self.text is None:
            return rng.integers(0, self.vocab, size=length).tolist()
        start = int(rng.integers(0, len(self.text)))
        start = self.text.find(" ", start) + 1  # begin at a word, not inside one
        ids: list[int] = []
        span = 6 * length + 64
        while len(ids) < length:
            piece = self.text[start:start + span]
            if len(piece) < span:  # near the end: wrap around to the beginning
                piece += self.text[: span - len(piece)]
            ids = self.tokenizer.encode(piece)
            span *= 2
        return ids[:length]


def make_workload(spec: WorkloadSpec, tokenizer=None, vocab: int = 4096) -> list[Request]:
    """The requests of a spec, ids 0..n-1 in arrival order (closed-loop ones last, in release
    order). The same spec and seed always give the same requests."""
    spec.validate()
    rng = np.random.default_rng(spec.seed)
    n = spec.requests
    if spec.kind == "poisson":
        arrivals: list[float | None] = poisson_arrivals(n, spec.rate, rng)
    elif spec.kind == "gamma":
        arrivals = gamma_arrivals(n, spec.rate, spec.burstiness, rng)
    elif spec.kind == "fixed":
        arrivals = [0.0] * min(n, spec.concurrency) + [None] * max(0, n - spec.concurrency)
    else:  # interference
        arrivals = [0.0] * n
    if spec.ramp_up_s:
        arrivals = ramp_up(arrivals, spec.ramp_up_s)
    if spec.lengths is not None:
        lengths = load_lengths(spec.lengths)
        prompt_lens = lengths.input.draw(rng, n)
        output_lens = lengths.output.draw(rng, n)
    else:
        prompt_lens = rng.integers(spec.prompt_len[0], spec.prompt_len[1] + 1, size=n).tolist()
        output_lens = rng.integers(spec.output_len[0], spec.output_len[1] + 1, size=n).tolist()
    if spec.kind == "interference":
        arrivals.append(spec.long_at_s)
        prompt_lens.append(spec.long_prompt_len)
        output_lens.append(int(rng.integers(spec.output_len[0], spec.output_len[1] + 1)))
    source = PromptSource(tokenizer, vocab)
    shared: list[int] = []
    if spec.shared_prefix_len:  # its own generator: the requests' own draws stay as without it
        shared = source.prompt(spec.shared_prefix_len, np.random.default_rng([spec.seed, 1]))
    requests = [
        Request(id=i, prompt_ids=shared + source.prompt(p, rng), output_len=o, arrival_s=a)
        for i, (a, p, o) in enumerate(zip(arrivals, prompt_lens, output_lens, strict=True))
    ]
    if source.text is not None:
        for r in requests:
            r.prompt_text = source.text_of(r.prompt_ids)
    return requests
