"""A disaggregated run computed from measured costs: a workload's arrivals replayed on two
simulated workers, a prefill worker and a decode worker, each as fast as the measured engine.

Used where the engine has fewer than two cores of its own, so two live workers would share a
core and each would measure the other's work. The rules are the live workers' own
(engine/disagg/workers.py):
- the prefill worker serves arrivals first come, first served, one whole prompt at a time; a
  prompt's first token comes at the end of its prefill, then the worker copies its KV out
  (export) before it takes the next prompt;
- the decode worker, before each step, takes every handover sent by then (up to its batch
  limit), copying each one's KV into its pool (import), then decodes one token for each
  sequence it holds; a sequence leaves after its last token.
A request's handover is from its first token to the decode worker holding its KV. Every cost is
read from a table of measured points (CostTable). Pure: no clock, no engine; torch-free.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True)
class CostTable:
    """Seconds measured at points xs (ascending): linear between two points; beyond the ends,
    the nearest segment's line (never below zero); one point: that cost everywhere."""

    xs: tuple[float, ...]
    seconds: tuple[float, ...]

    def __post_init__(self):
        if not self.xs or len(self.xs) != len(self.seconds):
            raise ValueError("a cost table needs as many costs as points, at least one")
        if any(b <= a for a, b in zip(self.xs, self.xs[1:])):
            raise ValueError("a cost table's points must ascend")

    def at(self, x: float) -> float:
        xs, ys = self.xs, self.seconds
        if len(xs) == 1:
            return ys[0]
        i = min(max(bisect_left(xs, x), 1), len(xs) - 1)
        x0, x1, y0, y1 = xs[i - 1], xs[i], ys[i - 1], ys[i]
        return max(0.0, y0 + (y1 - y0) * (x - x0) / (x1 - x0))

    def to_json(self) -> dict:
        return {"x": list(self.xs), "seconds": list(self.seconds)}

    @classmethod
    def from_json(cls, data: dict) -> CostTable:
        return cls(tuple(data["x"]), tuple(data["seconds"]))


@dataclass(frozen=True)
class WorkerCosts:
    """The measured costs a replay runs on: prefill and KV export and import by prompt length,
    a decode step by batch size."""

    prefill: CostTable
    decode: CostTable
    export: CostTable
    adopt: CostTable  # the import: copying a handover into the decode worker's pool

    def to_json(self) -> dict:
        return {name: getattr(self, name).to_json()
                for name in ("prefill", "decode", "export", "adopt")}

    @classmethod
    def from_json(cls, data: dict) -> WorkerCosts:
        return cls(**{name: CostTable.from_json(data[name])
                      for name in ("prefill", "decode", "export", "adopt")})


@dataclass(frozen=True)
class ReplayRequest:
    id: int
    arrival_s: float
    prompt_len: int
    output_len: int  # tokens, the first (from the prefill worker) included


@dataclass
class ReplayedRequest:
    """One request's computed life, in seconds from the run's start."""

    id: int
    arrival_s: float
    prompt_len: int
    prefill_start_s: float
    first_token_s: float
    sent_s: float = 0.0
    admitted_s: float = 0.0  # the decode worker holds its KV
    token_s: list[float] = field(default_factory=list)

    @property
    def handover_s(self) -> float:
        return self.admitted_s - self.first_token_s

    def to_json(self) -> dict:
        """The run command's request shape (admitted_s: its prefill began), plus the
        handover's times."""
        return {"id": self.id, "arrival_s": self.arrival_s, "admitted_s": self.prefill_start_s,
                "first_token_s": self.first_token_s, "finish_s": self.token_s[-1],
                "prompt_len": self.prompt_len, "output_len": len(self.token_s),
                "token_s": list(self.token_s), "preemptions": 0, "sent_s": self.sent_s,
                "decode_admitted_s": self.admitted_s}


def replay(requests: Sequence[ReplayRequest], costs: WorkerCosts,
           max_batch: int) -> list[ReplayedRequest]:
    """Each request's computed times (in the order given), by the rules in the module
    docstring."""
    if max_batch < 1:
        raise ValueError("max batch must be at least 1")
    if any(r.output_len < 1 for r in requests):
        raise ValueError("every request produces at least one token")
    done: dict[int, ReplayedRequest] = {}
    free_at = 0.0  # the prefill worker
    for r in sorted(requests, key=lambda r: (r.arrival_s, r.id)):
        start = max(r.arrival_s, free_at)
        first = start + costs.prefill.at(r.prompt_len)
        free_at = first + costs.export.at(r.prompt_len)
        done[r.id] = ReplayedRequest(r.id, r.arrival_s, r.prompt_len, start, first, free_at,
                                     token_s=[first])
    left = {r.id: r.output_len - 1 for r in requests}
    sent = sorted(done.values(), key=lambda d: (d.sent_s, d.id))
    t, i, running = 0.0, 0, []
    while i < len(sent) or running:
        if not running and sent[i].sent_s > t:
            t = sent[i].sent_s  # idle until the next handover
        while i < len(sent) and sent[i].sent_s <= t and len(running) < max_batch:
            d = sent[i]
            i += 1
            t += costs.adopt.at(d.prompt_len)
            d.admitted_s = t
            if left[d.id] > 0:
                running.append(d)
        if running:
            t += costs.decode.at(len(running))
            for d in running:
                d.token_s.append(t)
                left[d.id] -= 1
            running = [d for d in running if left[d.id] > 0]
    return [done[r.id] for r in requests]
