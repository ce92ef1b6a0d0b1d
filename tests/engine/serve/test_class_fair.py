"""The class run's fair share (engine.serve.class_fair), without an engine: the order in which
waiting requests enter it."""

from __future__ import annotations

from engine.serve.class_fair import FairQueue


def take(q: FairQueue, n: int) -> list[str]:
    return [q.pop()[1] for _ in range(n)]


def test_a_burst_does_not_go_before_a_students_first_request():
    q = FairQueue()
    for i in range(50):
        q.push("a", f"a{i}")
    assert take(q, 4) == ["a0", "a1", "a2", "a3"]  # alone, a fills the free places
    q.push("b", "b0")  # b sends one while a holds four
    q.done("a")  # one of a's ends: the free place is b's
    assert q.pop()[:2] == ("b", "b0")
    q.done("a")
    assert q.pop()[:2] == ("a", "a4")  # and then a goes on, in the order a sent
    assert len(q) == 45 and q.waiting("a") == 45 and q.waiting("b") == 0


def test_equal_students_take_turns_and_the_one_served_least_goes_first():
    q = FairQueue()
    for s in "xyz":
        for i in range(3):
            q.push(s, f"{s}{i}")
    order = [q.pop()[0] for _ in range(6)]  # nobody ends: in flight grows one each, in turn
    assert order == ["x", "y", "z", "x", "y", "z"]
    for s in "xyz":
        q.done(s)
        q.done(s)
    q.served("x", 10)  # x and z were served tokens; y none
    q.served("z", 5)
    assert [q.pop()[0] for _ in range(3)] == ["y", "z", "x"]
    assert q.pop() is None


def test_removing_a_waiting_request():
    q = FairQueue()
    q.push("a", 1)
    q.push("a", 2)
    assert q.remove("a", 1) and not q.remove("a", 1) and not q.remove("b", 2)
    assert q.pop()[1] == 2 and q.pop() is None and len(q) == 0
