"""The worker's side of the class run's messages (engine.lab.worker._Pipes), on a real pipe
without a process: a running job's inbox gets the "class" messages sent to it, including those
that came while the worker waited for a lent gap's answer; other messages keep their place."""

from __future__ import annotations

import multiprocessing as mp

import pytest

from engine.lab import worker


@pytest.fixture
def pipes():
    reader, writer = mp.Pipe(duplex=False)
    yield worker._Pipes(reader, None, mp.RawValue("q", 0)), writer
    reader.close()
    writer.close()


def test_the_inbox_takes_its_own_messages_and_drops_an_ended_runs(pipes):
    p, send = pipes
    assert p.class_messages(7, 0.0) == []
    send.send(("class", 7, {"op": "send", "id": "s1"}))
    send.send(("class", 6, {"op": "stop"}))  # a run that has ended
    send.send(("class", 7, {"op": "set", "changes": {"max_batch": 2}}))
    assert p.class_messages(7, 1.0) == [{"op": "send", "id": "s1"},
                                        {"op": "set", "changes": {"max_batch": 2}}]


def test_messages_that_come_during_a_gaps_wait_are_held_and_the_answer_is_kept(pipes):
    p, send = pipes
    send.send(("class", 3, {"op": "send", "id": "s1"}))
    send.send(("nofill", 3))  # the answer a lent gap waits for
    assert p.receive() == ("nofill", 3)  # the class message before it is held, not lost
    send.send(("class", 3, {"op": "send", "id": "s2"}))
    send.send(("run", 9, "sweep_point", {}, {}))  # not the inbox's: kept for receive
    send.send(("class", 3, {"op": "stop"}))
    assert p.class_messages(3, 0.0) == [{"op": "send", "id": "s1"}, {"op": "send", "id": "s2"}]
    assert p.receive() == ("run", 9, "sweep_point", {}, {})
    assert p.class_messages(3, 0.0) == [{"op": "stop"}]


def test_stop_ends_the_worker_from_the_inbox_too(pipes):
    p, send = pipes
    send.send(("stop",))
    with pytest.raises(worker._Stop):
        p.class_messages(1, 1.0)
