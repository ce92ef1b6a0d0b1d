"""The two worker processes of a disaggregated run, each with an engine of its own on one model.

The prefill worker takes requests as they arrive (first come, first served), prefills one whole
prompt a step, sends the first token and a copy of the KV blocks to the decode worker
(handover.py) and frees its blocks. The decode worker, before each step, maps every handover that
has come in into its own pool (up to its batch limit), then decodes one token for each sequence
it holds; a finished request's record goes to the parent. Both read one clock: time.monotonic()
(system-wide on Linux) minus the run's start, which the parent sends.

Errors never leave a worker as a traceback: a worker sends one line (WorkerError) to the parent
and ends; the parent stops the other one.
"""

from __future__ import annotations

import os
import queue
import time
from collections import deque
from dataclasses import dataclass, field

POLL_S = 0.05  # longest wait between two looks at a queue while there is nothing to run


@dataclass
class Ready:
    worker: str
    threads: int
    cores: list[int]


@dataclass
class WorkerError:
    worker: str
    message: str


@dataclass
class StepRecord:
    """One step of a worker: prefill tokens or decode rows, and when it ran."""

    worker: str
    start_s: float
    end_s: float
    prefill_tokens: int = 0
    decode_seqs: int = 0
    imported: int = 0  # handovers mapped into the pool just before this step
    import_s: float = 0.0


@dataclass
class Finished:
    """A request's record, from the decode worker: the prefill worker's times travel with it."""

    request_id: int
    arrival_s: float
    prefill_start_s: float
    first_token_s: float
    sent_s: float
    admitted_s: float  # the decode worker holds its KV: the handover is over
    token_s: list[float]
    output_ids: list[int]
    prompt_len: int
    kv_bytes: int
    export_s: float


@dataclass
class Done:
    worker: str
    steps: list[StepRecord] = field(default_factory=list)


def _start(config, cores, name: str, out) -> object:
    """Pin this process to its cores (when given) and build its engine; tells the parent."""
    from ..lab import cores as core_pins

    if cores:
        core_pins.pin(0, cores)
    from ..llm_engine import LLMEngine

    engine = LLMEngine(config)
    engine.warm_up()
    import torch

    out.put(Ready(name, torch.get_num_threads(), sorted(os.sched_getaffinity(0))))
    return engine


def _wait(q, parent: int):
    """The next item of a control queue; ends this process if its parent has gone (a parent
    killed outright cannot end its workers, so they end themselves)."""
    while True:
        try:
            return q.get(timeout=1.0)
        except queue.Empty:
            if os.getppid() != parent:
                raise SystemExit(1) from None


def _one_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}"


def prefill_main(config, cores, control, handoff, out) -> None:
    """The prefill worker's body (a spawned process): see the module docstring."""
    try:
        from .handover import make_handover

        parent = os.getppid()
        engine = _start(config, cores, "prefill", out)
        requests, start = _wait(control, parent)
        clock = lambda: time.monotonic() - start  # noqa: E731
        pending = deque(sorted(requests, key=lambda r: (r.arrival_s, r.id)))
        steps: list[StepRecord] = []
        while pending:
            ahead = pending[0].arrival_s - clock()
            if ahead > 0:
                time.sleep(min(ahead, POLL_S))
                continue
            req = pending.popleft()
            seq = engine.new_sequence(req.prompt_ids, req.output_len, req.sampling,
                                      ignore_eos=not req.stop_at_eos, seq_id=req.id)
            if not engine.reserve(seq, seq.num_uncomputed):
                raise RuntimeError(f"request {req.id}: the prefill worker's KV pool cannot hold "
                                   f"its {len(req.prompt_ids)} prompt tokens")
            begin = clock()
            engine.step([], [(seq, seq.num_uncomputed)])
            end = clock()
            handover = make_handover(engine, seq)
            engine.release(seq)
            sent = clock()
            handover.arrival_s, handover.prefill_start_s = req.arrival_s, begin
            handover.first_token_s, handover.sent_s = end, sent
            steps.append(StepRecord("prefill", begin, sent, prefill_tokens=len(req.prompt_ids)))
            handoff.put(handover)
        handoff.put(None)
        out.put(Done("prefill", steps))
        # The decode worker fetches each shared copy's file descriptor from this process when it
        # unpickles the handover: this process stays until the parent says it may go.
        _wait(control, parent)
    except BaseException as error:  # one line to the parent, never a traceback
        out.put(WorkerError("prefill", _one_line(error)))
        handoff.put(None)


def decode_main(config, cores, max_batch, control, handoff, out) -> None:
    """The decode worker's body (a spawned process): see the module docstring."""
    try:
        from .handover import import_kv

        parent = os.getppid()
        engine = _start(config, cores, "decode", out)
        start = _wait(control, parent)
        clock = lambda: time.monotonic() - start  # noqa: E731
        waiting: deque = deque()
        running: list = []
        live: dict[int, dict] = {}
        steps: list[StepRecord] = []
        upstream_done = False
        while True:
            if not upstream_done:
                idle = not running and not waiting
                upstream_done = _take_handovers(handoff, waiting, block=idle)
                if idle and os.getppid() != parent:
                    raise SystemExit(1)
            imported, import_begin = 0, clock()
            while waiting and len(running) < max_batch:
                h = waiting.popleft()
                seq = import_kv(engine, h)
                admitted = clock()
                live[seq.id] = {"h": h, "admitted": admitted, "token_s": [h.first_token_s],
                                "kv_bytes": h.nbytes}
                imported += 1
                h.k = h.v = None  # the shared copy can go now
                if seq.done:
                    _finish(engine, seq, live.pop(seq.id), out)
                else:
                    running.append(seq)
            import_s = clock() - import_begin
            if not running:
                if upstream_done and not waiting:
                    break
                continue
            for seq in running:
                if not engine.reserve(seq, 1):
                    raise RuntimeError("the decode worker's KV pool is full: raise "
                                       "--kv-budget-mib")
            begin = clock()
            engine.step(running, [])
            end = clock()
            steps.append(StepRecord("decode", begin, end, decode_seqs=len(running),
                                    imported=imported, import_s=import_s))
            still = []
            for seq in running:
                live[seq.id]["token_s"].append(end)
                if seq.finished or seq.done:
                    _finish(engine, seq, live.pop(seq.id), out)
                else:
                    still.append(seq)
            running = still
        out.put(Done("decode", steps))
    except BaseException as error:  # one line to the parent, never a traceback
        out.put(WorkerError("decode", _one_line(error)))


def _take_handovers(handoff, waiting: deque, block: bool) -> bool:
    """Move every handover that has come in into waiting (waiting up to POLL_S for the first one
    when block); True once the prefill worker said it has sent everything."""
    try:
        item = handoff.get(timeout=POLL_S) if block else handoff.get_nowait()
        while True:
            if item is None:
                return True
            waiting.append(item)
            item = handoff.get_nowait()
    except queue.Empty:
        return False


def _finish(engine, seq, record: dict, out) -> None:
    h = record["h"]
    engine.release(seq)
    out.put(Finished(
        request_id=seq.id, arrival_s=h.arrival_s, prefill_start_s=h.prefill_start_s,
        first_token_s=h.first_token_s, sent_s=h.sent_s, admitted_s=record["admitted"],
        token_s=record["token_s"], output_ids=list(seq.output_ids),
        prompt_len=len(seq.prompt_ids), kv_bytes=record["kv_bytes"],
        export_s=h.sent_s - h.first_token_s))
