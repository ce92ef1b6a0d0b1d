"""Fill the measurement cache before a class: `python -m lessons.warm`.

Runs every job the pages show by default (each lesson's `warm_jobs()`, the about page's machine
description, the engine check's default point) through an engine service of its own, which
writes results to the same disk cache as the server (cache_dir()/results, $LLM_SPEED_CACHE).
A running server picks them up the next time a reader asks: nobody waits for those points.
Jobs already cached are skipped; --fresh measures them again.

First it builds the engine's C++ decode-attention kernel for this CPU (`python -m engine
build-kernel`, once per machine): engines never compile it themselves, so a reader's request never
waits on the compiler, and the worker's engines use it only once it is built. Then it times the
lessons' models' matrix-product plans with that build and measures the machine's limits
(`python -m engine tune`, once per machine: tens of seconds on 2 cores), which a reader's first
engine would otherwise time and the first pages measure (the `info` job), while readers wait.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time

from engine.lab.client import EngineService

from .engine_check import EngineCheckPage
from .registry import LESSONS, lesson_class


def jobs_to_warm(slugs: list[str] | None = None) -> list[tuple[str, str, dict]]:
    """(where, kind, params) for the pages asked for (all by default)."""
    jobs: list[tuple[str, str, dict]] = [("about", "info", {})]
    if not slugs:
        jobs.append(("engine-check", "sweep_point", EngineCheckPage().params_for_job()))
    for lesson in LESSONS:
        if slugs and lesson.slug not in slugs:
            continue
        for kind, params in lesson_class(lesson).warm_jobs():
            jobs.append((lesson.slug, kind, params))
    return jobs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lessons.warm", description=__doc__.splitlines()[0])
    parser.add_argument("--lesson", action="append", metavar="SLUG",
                        help="only this lesson (repeat for more); default: every page")
    parser.add_argument("--fresh", action="store_true", help="measure cached points again")
    args = parser.parse_args(argv)
    known = {lesson.slug for lesson in LESSONS}
    unknown = sorted(set(args.lesson or []) - known)
    if unknown:
        print(f"error: no lesson called {unknown[0]!r}: choose from {', '.join(sorted(known))}",
              file=sys.stderr)
        return 2
    # Their own processes (this one stays torch-free); they print their progress, and a machine
    # without a compiler only loses the kernel (the engine uses plain torch: its plans are timed
    # without it), so warming goes on.
    for command in ("build-kernel", "tune"):
        subprocess.run([sys.executable, "-m", "engine", command], check=False)
    service = EngineService()
    failed = 0
    try:
        for where, kind, params in jobs_to_warm(args.lesson):
            start = time.monotonic()
            job = service.submit(kind, params, use_cache=not args.fresh)
            job.wait()
            took = time.monotonic() - start
            if job.state == "done":
                how = "already cached" if job.cached else f"measured in {took:.1f} s"
                print(f"{where:<16} {kind:<12} {how}")
            else:
                failed += 1
                print(f"{where:<16} {kind:<12} {job.state}: {job.error or ''}", file=sys.stderr)
    finally:
        service.shutdown()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
