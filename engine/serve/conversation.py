"""Multi-turn conversations (`--workload multi-turn`): N conversations of T turns each, where a
turn's prompt is the whole conversation so far (every earlier prompt and answer) plus the user's
new message, sent a think time after the previous answer ended. So prompts grow turn by turn,
as they do in chat, and a prefix cache finds each turn's history already computed.

Conversations start at Poisson arrivals of `rate` per second (all at once at inf). A turn's
user message and output length are drawn uniformly from prompt_len and output_len (its message
is a corpus slice, as workload.PromptSource makes them). The answers are the server's own
text, so a turn's prompt is known only when the turn before it ended: the client asks
`follow_up` for it then.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

from ..errors import ConfigError
from .workload import PromptSource, Request, poisson_arrivals

SEPARATOR = "\n\n"  # between an answer and the next message
SEPARATOR_TOKENS = 4  # room left for it and for re-tokenizing at the joins, per turn


@dataclass(frozen=True)
class MultiTurnSpec:
    conversations: int = 4
    turns: int = 3
    think_time_s: float = 1.0
    rate: float = math.inf  # conversations starting per second
    prompt_len: tuple[int, int] = (32, 128)  # each user message
    output_len: tuple[int, int] = (16, 64)  # each answer
    seed: int = 0

    def validate(self) -> None:
        if self.conversations < 1 or self.turns < 1:
            raise ConfigError("multi-turn needs at least 1 conversation of at least 1 turn")
        if not (self.think_time_s >= 0 and math.isfinite(self.think_time_s)):
            raise ConfigError(f"think time must be 0 s or more (got {self.think_time_s})")
        if not self.rate > 0:
            raise ConfigError(f"rate must be more than 0 conversations/s, or inf (got "
                              f"{self.rate})")

    def to_json(self) -> dict:
        out = asdict(self)
        out["kind"] = "multi-turn"
        out["requests"] = self.conversations * self.turns
        out["rate"] = "inf" if math.isinf(self.rate) else self.rate
        out["prompt_len"], out["output_len"] = list(self.prompt_len), list(self.output_len)
        return out


class Conversations:
    """Every turn of every conversation as a Request (id = conversation x turns + turn): first
    turns with their start times, later ones with arrival None, released by follow_up. A later
    turn's prompt_ids are a stand-in as long as its prompt can get, for the context check; its
    text is made when the turn before it ends."""

    def __init__(self, spec: MultiTurnSpec, tokenizer):
        spec.validate()
        self.spec = spec
        self.tokenizer = tokenizer
        rng = np.random.default_rng(spec.seed)
        n, t = spec.conversations, spec.turns
        starts = poisson_arrivals(n, spec.rate, rng)
        source = PromptSource(tokenizer)
        self.messages: dict[int, str] = {}
        self.requests: list[Request] = []
        for c in range(n):
            so_far = 0
            for k in range(t):
                user = int(rng.integers(spec.prompt_len[0], spec.prompt_len[1] + 1))
                output = int(rng.integers(spec.output_len[0], spec.output_len[1] + 1))
                ids = source.prompt(user, rng)
                rid = c * t + k
                self.messages[rid] = tokenizer.decode(ids) if tokenizer is not None else ""
                longest = so_far + user + (SEPARATOR_TOKENS if k else 0)
                self.requests.append(Request(rid, ids if k == 0 else [0] * longest, output,
                                             arrival_s=starts[c] if k == 0 else None))
                so_far = longest + output
        self.prompts = [self.messages[r.id] if r.arrival_s is not None else ""
                        for r in self.requests]

    def conversation(self, request_id: int) -> tuple[int, int]:
        """(conversation, turn) of a request id."""
        return divmod(request_id, self.spec.turns)

    def follow_up(self, request_id: int, prompt: str, answer: str) -> tuple[int, str, float] | None:
        """The next turn of this request's conversation: (its id, its prompt text, the think
        time to wait), or None after the last turn."""
        _, turn = self.conversation(request_id)
        if turn + 1 >= self.spec.turns:
            return None
        nxt = request_id + 1
        return nxt, prompt + answer + SEPARATOR + self.messages[nxt], self.spec.think_time_s
