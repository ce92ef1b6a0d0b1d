"""What a serving run records: one trace per request, one per engine step, and the live events.

Every time is in seconds from the run's start on one clock (time.perf_counter), read after the
engine's step returned, i.e. after the device finished the work (see loop.py). The request
and step traces are the raw material of every chart and of the metrics (metrics.py); the events
carry the same facts to a listener while the run happens.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field


@dataclass
class RequestTrace:
    """One request's life: arrival, first admission, every output token, finish.

    output_len is the number of output tokens asked for (forced: end-of-text is ignored unless
    the request said otherwise; a request that stopped at end-of-text has it set to what it
    produced when it finishes); token_s holds the time of each token produced, so a finished
    request has len(token_s) == output_len and token_s[0] == first_token_s.
    """

    id: int
    arrival_s: float | None  # None until a closed-loop request is released
    prompt_len: int
    output_len: int
    admitted_s: float | None = None  # first admission; a preempted request keeps it
    first_token_s: float | None = None
    finish_s: float | None = None
    token_s: list[float] = field(default_factory=list)
    preemptions: int = 0
    output_ids: list[int] = field(default_factory=list)
    cached_tokens: int = 0  # prompt tokens found in the prefix cache at first admission
    traffic_class: str | None = None  # the lane it ran in (traffic classes only)
    tenant: str | None = None
    refused: str | None = None  # why its class refused it at arrival (it never ran)
    # Per-phase times (serve/phases.py): the tokenizer's run on the prompt, the time spent
    # turning output ids into text, when the text was ready; behind a server also when the
    # request reached it and when its response was handed back.
    tokenize_start_s: float | None = None
    tokenize_end_s: float | None = None
    detokenize_s: float = 0.0
    response_s: float | None = None
    received_s: float | None = None
    response_end_s: float | None = None

    @property
    def finished(self) -> bool:
        return self.finish_s is not None

    def to_json(self) -> dict:
        return {
            "id": self.id,
            "arrival_s": self.arrival_s,
            "admitted_s": self.admitted_s,
            "first_token_s": self.first_token_s,
            "finish_s": self.finish_s,
            "prompt_len": self.prompt_len,
            "output_len": self.output_len,
            "token_s": list(self.token_s),
            "preemptions": self.preemptions,
            **({"traffic_class": self.traffic_class, "tenant": self.tenant,
                "refused": self.refused} if self.traffic_class or self.refused else {}),
            "detokenize_s": self.detokenize_s,
            # the phases' moments only where they happened, as the lab's records keep them
            **{name: value for name, value in (
                ("tokenize_start_s", self.tokenize_start_s),
                ("tokenize_end_s", self.tokenize_end_s), ("response_s", self.response_s),
                ("received_s", self.received_s), ("response_end_s", self.response_end_s))
               if value is not None},
        }


@dataclass
class StepTrace:
    """One engine step: when it ran, what it ran, and how full the engine was.

    decode_seqs counts sequences that decoded one token; prefill_tokens counts prompt (or
    recomputed) tokens over all prefill chunks; running counts the batch slots held during the
    step (sequences admitted and not yet finished or preempted, whether or not they ran).
    kv_blocks_used is read right after the step, before finished sequences free their blocks.
    padding_rows counts rows computed and thrown away (a static batch's finished members).
    """

    index: int
    start_s: float
    end_s: float
    prefill_tokens: int
    decode_seqs: int
    kv_blocks_used: int
    running: int
    padding_rows: int = 0
    decode_ids: list[int] = field(default_factory=list)
    prefill_chunks: list[tuple[int, int]] = field(default_factory=list)  # (request id, tokens)
    admitted_ids: list[int] = field(default_factory=list)
    preempted_ids: list[int] = field(default_factory=list)
    finished_ids: list[int] = field(default_factory=list)

    @property
    def num_tokens(self) -> int:
        """Tokens the model processed in this step (what the per-step token budget limits)."""
        return self.decode_seqs + self.prefill_tokens

    def to_json(self) -> dict:
        return {
            "index": self.index,
            "start_s": self.start_s,
            "end_s": self.end_s,
            "prefill_tokens": self.prefill_tokens,
            "decode_seqs": self.decode_seqs,
            "kv_blocks_used": self.kv_blocks_used,
            "running": self.running,
            "padding_rows": self.padding_rows,
            "decode_ids": list(self.decode_ids),
            "prefill_chunks": [list(c) for c in self.prefill_chunks],
            "admitted_ids": list(self.admitted_ids),
            "preempted_ids": list(self.preempted_ids),
            "finished_ids": list(self.finished_ids),
        }


# ---- live events: what a listener receives while a run happens ------------------------------
@dataclass
class RequestEvent:
    """A change in a request's state: "arrived", "admitted", "preempted", "finished" (or
    "refused" by its traffic class)."""

    kind: str
    request_id: int
    t_s: float


@dataclass
class TokenEvent:
    """One output token of one request, stamped with the end of the step that produced it.

    index is 0 for the first output token; text is the token's piece of text when the run was
    asked to stream text (None otherwise; a piece may be "" while a multi-byte character is
    incomplete).
    """

    request_id: int
    index: int
    token_id: int
    t_s: float
    text: str | None = None
    kind: str = "token"


@dataclass
class StepEvent:
    """One finished engine step (its full trace)."""

    step: StepTrace
    kind: str = "step"


Event = RequestEvent | TokenEvent | StepEvent


def event_to_json(event: Event) -> dict:
    """A JSON-ready dict of any event, with its kind ("token", "step", "arrived", ...)."""
    if isinstance(event, StepEvent):
        return {"kind": "step", **event.step.to_json()}
    return asdict(event)
