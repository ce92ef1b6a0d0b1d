"""The classroom scheduler's tunables in one record (engine.lab.policy reads them, the queue's
ranks too: engine.lab.job_queue). Times are seconds. Torch-free.

Each value is a trade between the readers who wait and the run they wait for; the page
docs/decisions/classroom-queue.md tells how each was chosen.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Settings:
    """How long readers wait before the queue moves things for them, and how deep it pauses.

    The queue's ranks (engine.lab.job_queue):
    - overdue_s: a reader's first queued point waiting this long goes before everything.
    - newcomer_due_s: a newcomer's first job waiting this long goes there too.
    - age_s: a bigger job (a run, a load test) waiting this long goes right behind the points.
    - starve_s: and waiting this long, it counts as a point: big jobs wait, they never starve.

    Giving way (engine.lab.policy):
    - preempt_after_s: a short job waiting this long pauses a long run, or stops an engine's build,
    - turn_s: once that run has run this long since it started or went on.
    - max_pause_s: a paused run goes on after this long at the first moment no other reader's
      point or newcomer's first job waits, before the runs and load tests that wait;
    - hard_pause_s: and after this long whatever waits: a paused run always ends.
    - max_paused: runs paused inside each other's pauses for any shorter job (each holds an
      engine in the worker); the run inside the last may be paused once more, for points alone.
    - lend_gaps: a running job's idle gaps run waiting points.

    Measuring again (engine.lab.dispatcher):
    - remeasures: a disturbed result is measured again at most this many times,
    - quiet_wait_s: each after a wait of at most this long for the engine's cores to be quiet.
    """

    overdue_s: float = 2.0
    newcomer_due_s: float = 3.0
    age_s: float = 30.0
    starve_s: float = 90.0
    preempt_after_s: float = 1.0
    turn_s: float = 2.0
    max_pause_s: float = 10.0
    hard_pause_s: float = 30.0
    max_paused: int = 4
    lend_gaps: bool = True
    remeasures: int = 2
    quiet_wait_s: float = 5.0


DEFAULT = Settings()
