"""A mixed workload whose requests carry a traffic class and a tenant (engine/traffic.py).

Three sources share one server:
- chat: `chat_requests` short interactive requests arriving as a Poisson process at `chat_rate`
  per second, from `users` tenants in turn (user0, user1, ...);
- batch: a job of `batch_requests` long summaries (long prompts, moderate outputs), all submitted
  at t = 0 by the tenant "batchjob", class batch;
- flood: `flood_requests` interactive requests from one tenant, "flood", at `flood_rate` per
  second from t = 0: a client in a retry loop, or a script someone pointed at the chat endpoint.

The same spec and seed give the same requests whatever the scheduler does, so a FIFO run and a
run with lanes serve the identical workload. Prompts are real corpus text (serve/workload.py).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

from .errors import ConfigError
from .serve.workload import PromptSource, Request, poisson_arrivals

INTERACTIVE, BATCH = "interactive", "batch"
FLOOD_TENANT, BATCH_TENANT = "flood", "batchjob"


@dataclass
class MixSpec:
    chat_requests: int = 24
    chat_rate: float = 4.0
    chat_prompt: tuple[int, int] = (16, 64)
    chat_output: tuple[int, int] = (8, 24)
    users: int = 4
    batch_requests: int = 8
    batch_prompt: tuple[int, int] = (512, 768)
    batch_output: tuple[int, int] = (32, 64)
    flood_requests: int = 0
    flood_rate: float = 20.0
    seed: int = 0

    def validate(self) -> None:
        for what in ("chat_requests", "batch_requests", "flood_requests"):
            if getattr(self, what) < 0:
                raise ConfigError(f"{what.replace('_', ' ')} must be 0 or more")
        if self.chat_requests + self.batch_requests + self.flood_requests < 1:
            raise ConfigError("the mix needs at least one request")
        if self.users < 1:
            raise ConfigError(f"users must be at least 1 (got {self.users})")
        for what in ("chat_rate", "flood_rate"):
            value = getattr(self, what)
            if not value > 0:
                raise ConfigError(f"{what.replace('_', ' ')} must be above 0 per second, or inf "
                                  f"(got {value})")
        for what in ("chat_prompt", "chat_output", "batch_prompt", "batch_output"):
            low, high = getattr(self, what)
            if not 1 <= low <= high:
                raise ConfigError(f"{what.replace('_', ' ')} range {low}:{high} must satisfy "
                                  f"1 <= A <= B")

    @property
    def longest(self) -> int:
        """The most tokens (prompt plus output) any request of the mix can hold."""
        return max(self.chat_prompt[1] + self.chat_output[1],
                   self.batch_prompt[1] + self.batch_output[1])

    def to_json(self) -> dict:
        out = {"kind": "mix", **asdict(self)}
        for name in ("chat_rate", "flood_rate"):
            out[name] = "inf" if math.isinf(out[name]) else out[name]
        for name in ("chat_prompt", "chat_output", "batch_prompt", "batch_output"):
            out[name] = list(out[name])
        return out


def make_mix(spec: MixSpec, tokenizer=None, vocab: int = 4096) -> list[Request]:
    """The mix's requests, ids 0..n-1 in arrival order (ties: batch, then chat, then flood)."""
    spec.validate()
    rng = np.random.default_rng(spec.seed)
    source = PromptSource(tokenizer, vocab)

    def draw(n: int, lengths: tuple[int, int]) -> list[int]:
        return rng.integers(lengths[0], lengths[1] + 1, size=n).tolist()

    rows: list[tuple[float, int, str, str, int, int]] = []  # arrival, source, class, tenant, p, o
    for p, o in zip(draw(spec.batch_requests, spec.batch_prompt),
                    draw(spec.batch_requests, spec.batch_output), strict=True):
        rows.append((0.0, 0, BATCH, BATCH_TENANT, p, o))
    if spec.chat_requests:
        arrivals = poisson_arrivals(spec.chat_requests, spec.chat_rate, rng)
        for i, (a, p, o) in enumerate(zip(arrivals, draw(spec.chat_requests, spec.chat_prompt),
                                          draw(spec.chat_requests, spec.chat_output),
                                          strict=True)):
            rows.append((a, 1, INTERACTIVE, f"user{i % spec.users}", p, o))
    if spec.flood_requests:
        arrivals = poisson_arrivals(spec.flood_requests, spec.flood_rate, rng)
        for a, p, o in zip(arrivals, draw(spec.flood_requests, spec.chat_prompt),
                           draw(spec.flood_requests, spec.chat_output), strict=True):
            rows.append((a, 2, INTERACTIVE, FLOOD_TENANT, p, o))
    rows.sort(key=lambda r: (r[0], r[1]))
    return [Request(id=i, prompt_ids=source.prompt(p, rng), output_len=o, arrival_s=a,
                    traffic_class=cls, tenant=tenant)
            for i, (a, _, cls, tenant, p, o) in enumerate(rows)]
