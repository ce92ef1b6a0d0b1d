"""What the worker runs: a Run (one job's kind and params, and every job it answers) and the
state the service has put it in (RunState). Torch-free; engine.lab.policy decides on these,
engine.lab.dispatcher moves them from state to state.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from enum import Enum

from .events import Job


class RunState(Enum):
    """Where a run stands with the service: what it was last told, or asked for."""

    BUILDING = "building"  # the worker builds its engine (engine.lab.worker.prepare_engine)
    RUNNING = "running"  # its own work
    PAUSING = "pausing"  # told to pause between two steps (a pausable run)
    PAUSED = "paused"  # on the pause stack: the worker runs other jobs inside its pause
    STOPPING_BUILD = "stopping build"  # told to stop its build: queued again, the build kept
    CUTTING_SHORT = "cutting short"  # told to stop at its first figure: queued again whole
    GIVING_WAY = "giving way"  # a re-measure told to stop: its first result stands
    CANCELLING = "cancelling"  # every job has left it: told to stop

    @property
    def requeues(self) -> bool:
        """Told to stop with its jobs queued again (their "cancelled" means "wait again")."""
        return self in (RunState.STOPPING_BUILD, RunState.CUTTING_SHORT)

    @property
    def told(self) -> bool:
        """Told something it has not answered yet (pause, stop): nothing more is asked of it."""
        return self in (RunState.PAUSING, RunState.STOPPING_BUILD, RunState.CUTTING_SHORT,
                        RunState.GIVING_WAY, RunState.CANCELLING)


@dataclass(eq=False)
class Run:
    """One run of the worker's: the job that asked first, then those that asked the same
    question. The worker knows it by its id (the first job's)."""

    id: int
    jobs: list[Job]
    state: RunState = RunState.RUNNING
    first: Job | None = None  # jobs[0] when it started: its lead, even once every job has left
    figured: bool = False  # it has shown a first partial figure ("so_far")
    figure_only: bool = False  # a newcomer's first run started with the pause stack (nearly)
    # full: never paused, it stops at its first figure and is queued again whole
    started_at: float = field(default_factory=time.time)  # or when it last went on
    paused_at: float = 0.0

    def __post_init__(self) -> None:
        self.first = self.first or self.jobs[0]

    @property
    def lead(self) -> Job:
        """The job whose kind and params the worker runs: the first still in it, or the one it
        started with once the last has left (a run being stopped: cancel)."""
        return self.jobs[0] if self.jobs else self.first

    @property
    def building(self) -> bool:
        """The worker is building its engine (also while it is being told to stop that)."""
        return self.state in (RunState.BUILDING, RunState.STOPPING_BUILD)

    @property
    def cancelling(self) -> bool:
        return self.state is RunState.CANCELLING

    @property
    def sessions(self) -> list[str | None]:
        """The readers it answers."""
        return [j.session_id for j in self.jobs]


def jobs_of(*runs: Run | None) -> list[Job]:
    """Every job these runs answer (the running one and the paused ones; None for none)."""
    return [job for run in runs if run is not None for job in run.jobs]
