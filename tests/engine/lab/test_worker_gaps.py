"""The worker's lent gaps (engine.lab.worker.fill_gap), in process with stand-in pipes: each
short job the service sends into a running job's gap runs with the running job's engine set
aside, and the running job's params are checked once for the job, not again at every gap."""

from __future__ import annotations

import types
from collections import Counter

from engine.lab import registry, worker
from engine.lab.registry import ENGINE, JobSpec
from engine.lab.results import Record

RUNNING, FILLERS = 1, (2, 3, 4)


def _spec(kind: str) -> JobSpec:
    return JobSpec(kind, body="unused:unused", params=dict(ENGINE), result=Record, timed=False)


class _Pipes:
    """The service's side: answers each "gap" with the next of `answers`; records events."""

    def __init__(self, answers: list[tuple]):
        self.answers = list(answers)
        self.sent: list[tuple] = []
        self.cancel_id = types.SimpleNamespace(value=0)
        self.pause_id = None
        self.fill_id = types.SimpleNamespace(value=RUNNING)  # the running job may lend gaps

    def receive(self) -> tuple:
        return self.answers.pop(0)

    @property
    def events(self):
        return types.SimpleNamespace(send=self.sent.append)


def test_each_gap_sets_the_running_jobs_engine_aside_and_its_params_are_checked_once(
        monkeypatch):
    monkeypatch.setitem(registry.JOBS, "serving", _spec("serving"))
    monkeypatch.setitem(registry.JOBS, "point", _spec("point"))
    looked_up = Counter()

    def get_spec(kind):
        looked_up[kind] += 1
        return registry.JOBS[kind]

    def serving_body(params, emit, control):  # a serving loop with idle gaps to lend
        lent = [control.fill(0.05) for _ in range(4)]
        return {"lent": len(lent)}

    def point_body(params, emit, control):
        return {"point": True}

    aside = []
    monkeypatch.setattr(worker, "get_spec", get_spec)
    monkeypatch.setattr(worker, "body", lambda spec: {"serving": serving_body,
                                                      "point": point_body}[spec.kind])
    monkeypatch.setattr(worker, "prepare_engine", lambda *a: True)  # no model built here
    monkeypatch.setattr(worker, "set_aside", lambda key: aside.append(key) or "mine")
    monkeypatch.setattr(worker, "put_back", lambda key, mine: aside.append(("back", key, mine)))
    pipes = _Pipes([("run", FILLERS[0], "point", {}, {}), ("nofill", RUNNING),
                    ("run", FILLERS[1], "point", {}, {}), ("run", FILLERS[2], "point", {}, {})])

    worker.run_job(pipes, RUNNING, "serving", {"preset": "tiny"}, {})

    results = {m[1]: m[2] for m in pipes.sent if m[0] == "result"}
    assert results == {**{f: {"point": True} for f in FILLERS}, RUNNING: {"lent": 4}}
    assert [m for m in pipes.sent if m[0] == "gap"] == [("gap", RUNNING, 0.05)] * 4
    key = worker.engine_key(registry.JOBS["serving"].check({"preset": "tiny"}))
    assert aside == [key, ("back", key, "mine")] * 3  # the running job's engine, each filled gap
    assert looked_up == {"serving": 2, "point": 3}  # its run, its engine's key: once each
