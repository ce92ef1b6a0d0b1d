"""Per-student fair share for the class run's queue (engine.serve.class_run): which waiting
request enters the engine next. Pure: no clock, no engine, no threads.

Every student (and the background load, as one more "student") has a queue of their own, in
the order they sent. When the engine has room for one more request, `pop` takes the head of the
queue of the student with the fewest requests in the engine now; among those, the one served
the fewest output tokens so far; among those, the one whose turn came longest ago (round robin).
So a student who sends 50 at once has at most as many in the engine as anyone else who waits,
and another student's one request goes in at the next free place: it waits for one request to
end, never for the 50. `pop(among=...)` picks the same way among some students only (the class
run's lanes: the students first, the background load after).
"""

from __future__ import annotations

import itertools
from collections import Counter, deque
from collections.abc import Callable, Hashable
from typing import Any


class FairQueue:
    """Waiting requests by student; `pop` picks the next by fair share (module docstring).
    The caller says when a popped request ends (`done`) and what it was served (`served`)."""

    def __init__(self):
        self._queues: dict[str, deque[tuple[Hashable, Any]]] = {}
        self.in_flight: Counter[str] = Counter()  # requests popped and not yet done
        self.tokens: Counter[str] = Counter()  # output tokens served so far
        self._turn: dict[str, int] = {}  # when each student's last turn was (a counter)
        self._turns = itertools.count(1)
        self._size = 0

    def __len__(self) -> int:
        return self._size

    def waiting(self, student: str) -> int:
        return len(self._queues.get(student, ()))

    def push(self, student: str, key: Hashable, item: Any = None) -> None:
        """A request of `student` waits (key: its id; item: whatever the caller keeps)."""
        self._queues.setdefault(student, deque()).append((key, item))
        self._size += 1

    def order_key(self, student: str) -> tuple[int, int, int]:
        """The pick order: fewest in flight, then fewest tokens served, then longest since its
        last turn (0 for a student who never had one)."""
        return self.in_flight[student], self.tokens[student], self._turn.get(student, 0)

    def pop(self, among: Callable[[str], bool] | None = None) -> tuple[str, Hashable, Any] | None:
        """The next request to enter the engine: (student, key, item); None when none waits.
        among: only the students it says yes to are considered."""
        candidates = [s for s, q in self._queues.items() if q and (among is None or among(s))]
        if not candidates:
            return None
        student = min(candidates, key=self.order_key)
        key, item = self._queues[student].popleft()
        if not self._queues[student]:
            del self._queues[student]
        self._size -= 1
        self.in_flight[student] += 1
        self._turn[student] = next(self._turns)
        return student, key, item

    def remove(self, student: str, key: Hashable) -> bool:
        """Take a waiting request out (dropped before it entered); False if it is not waiting."""
        queue = self._queues.get(student)
        if not queue:
            return False
        for entry in queue:
            if entry[0] == key:
                queue.remove(entry)
                self._size -= 1
                if not queue:
                    del self._queues[student]
                return True
        return False

    def served(self, student: str, tokens: int = 1) -> None:
        self.tokens[student] += tokens

    def done(self, student: str) -> None:
        """A popped request of `student` ended (finished or dropped)."""
        if self.in_flight[student] > 0:
            self.in_flight[student] -= 1
