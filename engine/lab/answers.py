"""The dispatcher's use of the measurement cache (engine.lab.cache): which queued jobs it answers
at once, a nearby result to show one that waits, and storing what the worker measured. Keys are
the worker's device and engine version, the job's kind and its normalized params. Torch-free.
"""

from __future__ import annotations

from collections.abc import Iterator

from .cache import CacheStore, SharedResult, disturbed
from .events import Job
from .job_queue import JobQueue
from .supervisor import Worker


class Answers:
    """Cache lookups for queued jobs, and the store of measured results."""

    def __init__(self, cache: CacheStore):
        self.cache = cache
        self._generation = 0  # bumped per stored result: queued jobs are looked up again

    @staticmethod
    def key(job: Job, w: Worker) -> dict:
        return CacheStore.key(w.identity["device"], w.identity["engine_version"], job.kind,
                              job.params)

    def lookups(self, queue: JobQueue, w: Worker) -> Iterator[tuple[Job, str, dict]]:
        """(job, "hit" or "nearby", record) for queued jobs the cache answers, or can show a
        nearby result to while they wait (once each); each job is looked up once per stored
        result."""
        for job in queue:
            if not job.use_cache or job._cache_checked == self._generation:
                continue  # looked up already, and nothing new was stored since
            job._cache_checked = self._generation
            record = self.cache.get(self.key(job, w))
            if record is not None:
                yield job, "hit", record
            elif job.nearby:
                job.nearby = False  # offered once
                near = self.cache.nearest(self.key(job, w))
                if near is not None:
                    yield job, "nearby", near

    def store(self, lead: Job, jobs: list[Job], w: Worker, result: dict,
              measured_at: str) -> dict:
        """Keep a run's result if any of its jobs may be answered from the cache and it is
        quiet; returns the result to deliver (one object shared with the cache's hits)."""
        if disturbed(result) or not any(job.use_cache for job in jobs):
            return result  # (the cache would refuse a disturbed one: engine.lab.cache)
        result = SharedResult(result)  # a hit while a page holds it: this object
        self.cache.put(self.key(lead, w), result, measured_at)
        self._generation += 1
        return result
