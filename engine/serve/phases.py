"""Where one request's time goes: tokenize, queue, prefill, decode, detokenize (and, behind an
HTTP server, the time the server spends on it before and after the engine).

A request's times come from its trace (serve/trace.py) and the steps it ran in, all on the run's
one clock:

- tokenize: its prompt text turned into token ids (tokenize_start_s to tokenize_end_s);
- http_in (a server only): from the request reaching the server (received_s) to its hand-in to
  the engine (arrival_s), less the tokenizer's time in between (reading and checking the body);
- queue: from its arrival at the engine to its first admission, less the tokenizer's time when
  the tokenizer ran after arrival (an offline run tokenizes a request once it arrived);
- prefill: the summed durations of the engine steps that ran a chunk of its prompt (every
  chunk; after a preemption, the recomputation too);
- decode: the summed durations of the engine steps that decoded one of its tokens;
- detokenize: the tokenizer's time turning its output ids into text (every piece streamed, or
  one decode at the end);
- http_out (a server only): from its text being ready to its response's last byte handed to the
  HTTP server.

Its end-to-end time runs from its first moment (received_s, else arrival_s) to its last
(response_end_s, else response_s, else finish_s). What the phases do not cover is `other`: the
engine between steps (the scheduler, other requests' bookkeeping) and, after a preemption, its
second wait. The phases and other add up to the end-to-end time by construction; the phases
alone cover it to within the time between steps, which is what the tests check.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass

from .trace import RequestTrace, StepTrace

PHASES = ("http_in", "tokenize", "queue", "prefill", "decode", "detokenize", "http_out")


@dataclass(frozen=True)
class RequestPhases:
    """One finished request's time by phase, in seconds (module docstring)."""

    tokenize_s: float
    queue_s: float
    prefill_s: float
    decode_s: float
    detokenize_s: float
    other_s: float
    e2e_s: float
    http_in_s: float = 0.0
    http_out_s: float = 0.0

    @property
    def covered_s(self) -> float:
        """The time the named phases cover (everything but other)."""
        return sum(getattr(self, f"{name}_s") for name in PHASES)

    def to_json(self) -> dict:
        return asdict(self)


def step_time_by_request(steps: Iterable[StepTrace]) -> dict[int, tuple[float, float]]:
    """{request id: (seconds in steps that prefilled it, seconds in steps that decoded it)}."""
    out: dict[int, list[float]] = {}
    for step in steps:
        seconds = step.end_s - step.start_s
        for request_id, _ in step.prefill_chunks:
            out.setdefault(request_id, [0.0, 0.0])[0] += seconds
        for request_id in step.decode_ids:
            out.setdefault(request_id, [0.0, 0.0])[1] += seconds
    return {k: (v[0], v[1]) for k, v in out.items()}


def request_phases(trace: RequestTrace, prefill_s: float, decode_s: float
                   ) -> RequestPhases | None:
    """The phases of one request from its trace and its step time (step_time_by_request);
    None for a request that did not finish."""
    if trace.finish_s is None or trace.admitted_s is None or trace.arrival_s is None:
        return None
    tokenize = 0.0
    after_arrival = False
    if trace.tokenize_start_s is not None and trace.tokenize_end_s is not None:
        tokenize = trace.tokenize_end_s - trace.tokenize_start_s
        after_arrival = trace.tokenize_start_s >= trace.arrival_s
    start = trace.arrival_s if trace.received_s is None else trace.received_s
    http_in = 0.0 if trace.received_s is None else \
        max(0.0, trace.arrival_s - trace.received_s - tokenize)
    queue = max(0.0, trace.admitted_s - trace.arrival_s - (tokenize if after_arrival else 0.0))
    text_ready = trace.response_s if trace.response_s is not None else trace.finish_s
    http_out = 0.0 if trace.response_end_s is None else \
        max(0.0, trace.response_end_s - text_ready)
    end = trace.response_end_s if trace.response_end_s is not None else text_ready
    e2e = end - start
    covered = http_in + tokenize + queue + prefill_s + decode_s + trace.detokenize_s + http_out
    return RequestPhases(tokenize_s=tokenize, queue_s=queue, prefill_s=prefill_s,
                         decode_s=decode_s, detokenize_s=trace.detokenize_s,
                         other_s=e2e - covered, e2e_s=e2e, http_in_s=http_in,
                         http_out_s=http_out)


def run_phases(traces: Iterable[RequestTrace], steps: Iterable[StepTrace]
               ) -> dict[int, RequestPhases]:
    """The phases of every finished request of a run, by request id."""
    by_request = step_time_by_request(steps)
    out = {}
    for trace in traces:
        phases = request_phases(trace, *by_request.get(trace.id, (0.0, 0.0)))
        if phases is not None:
            out[trace.id] = phases
    return out


def mean_phases_ms(phases: Iterable[RequestPhases]) -> dict[str, float] | None:
    """Each phase's mean over requests in ms (other and e2e too); None for no request."""
    phases = list(phases)
    if not phases:
        return None
    names = [*PHASES, "other", "e2e"]
    return {name: 1000 * sum(getattr(p, f"{name}_s") for p in phases) / len(phases)
            for name in names}
