"""The costs a disaggregated replay runs on (engine/calc/disagg_replay.py), measured on one
engine: a whole prompt's prefill and its KV export and import by prompt length, and a decode step
by batch size. Each cost is the median of its rounds; every round is kept, so a reader can see
the spread.

The engine measured here stands for each worker: the replay assumes each has a core like the one
this engine runs on.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

from ..calc.disagg_replay import CostTable, WorkerCosts
from ..llm_engine import LLMEngine
from .handover import import_kv, make_handover


@dataclass
class MeasuredCosts:
    """The medians as cost tables, and every round: {cost name: {point: [seconds, ...]}}."""

    costs: WorkerCosts
    rounds: dict[str, dict[int, list[float]]]

    def to_json(self) -> dict:
        return {"costs": self.costs.to_json(),
                "rounds": {name: {str(x): times for x, times in by.items()}
                           for name, by in self.rounds.items()}}


def _prompt(engine: LLMEngine, length: int) -> list[int]:
    return [1 + i % 255 for i in range(length)]


def time_handover(engine: LLMEngine, prompt_len: int) -> tuple[float, float, float]:
    """One prompt's prefill, its export into shared memory, and its import back into the pool
    (the blocks a decode worker would take): three times in seconds. Blocks are given back."""
    seq = engine.new_sequence(_prompt(engine, prompt_len), 2, ignore_eos=True)
    moved = None
    try:
        if not engine.reserve(seq, seq.num_uncomputed):
            raise MemoryError(f"the KV pool cannot hold a {prompt_len}-token prompt")
        t0 = time.perf_counter()
        engine.step([], [(seq, seq.num_uncomputed)])
        t1 = time.perf_counter()
        handover = make_handover(engine, seq)
        t2 = time.perf_counter()
        engine.release(seq)
        t3 = time.perf_counter()
        moved = import_kv(engine, handover)
        engine.synchronize()
        t4 = time.perf_counter()
    finally:
        engine.release(seq)
        if moved is not None:
            engine.release(moved)
    return t1 - t0, t2 - t1, t4 - t3


def time_decode(engine: LLMEngine, batch: int, context: int, steps: int) -> list[float]:
    """`steps` decode steps of `batch` sequences, each with a `context`-token prompt."""
    seqs = [engine.new_sequence(_prompt(engine, context), steps + 1, ignore_eos=True)
            for _ in range(batch)]
    times = []
    try:
        for seq in seqs:
            if not engine.reserve(seq, seq.num_uncomputed + steps):
                raise MemoryError(f"the KV pool cannot hold {batch} sequences of {context} tokens")
            engine.step([], [(seq, seq.num_uncomputed)])
        for _ in range(steps):
            start = time.perf_counter()
            engine.step(seqs, [])
            times.append(time.perf_counter() - start)
    finally:
        for seq in seqs:
            engine.release(seq)
    return times


def measure_costs(engine: LLMEngine, prompt_lens: list[int], batches: list[int],
                  context: int, rounds: int = 3, on_point=None) -> MeasuredCosts:
    """Every cost the replay needs, each point `rounds` times (decode: `rounds` steps a batch).
    on_point(name, x), when given, is called before each point (progress)."""
    engine.warm_up()
    rounds_by: dict[str, dict[int, list[float]]] = {"prefill": {}, "export": {}, "adopt": {},
                                                    "decode": {}}
    for length in sorted(set(prompt_lens)):
        if on_point:
            on_point("handover", length)
        for _ in range(rounds):
            for name, seconds in zip(("prefill", "export", "adopt"),
                                     time_handover(engine, length)):
                rounds_by[name].setdefault(length, []).append(seconds)
    for batch in sorted(set(batches)):
        if on_point:
            on_point("decode", batch)
        rounds_by["decode"][batch] = time_decode(engine, batch, context, rounds)

    def table(name: str) -> CostTable:
        points = sorted(rounds_by[name])
        return CostTable(tuple(float(x) for x in points),
                         tuple(statistics.median(rounds_by[name][x]) for x in points))

    costs = WorkerCosts(prefill=table("prefill"), decode=table("decode"),
                        export=table("export"), adopt=table("adopt"))
    return MeasuredCosts(costs, rounds_by)
