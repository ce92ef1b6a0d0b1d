"""A lesson that lists its default view's jobs by label (LessonPage.default_jobs) and says what
one cached result means (expected_lines) gets the cache warmer's jobs and the instructor page's
numbers from the base page: the jobs in order, one line per cached job, none for the rest."""

from __future__ import annotations

from types import SimpleNamespace

from lessons.base import LessonPage
from lessons.experts import ExpertsLesson
from lessons.registry import LESSONS, lesson_class
from lessons.teaching import Cached, cached_lines

MIB = 1024 * 1024


def test_cached_lines_keep_the_order_and_skip_what_is_not_measured():
    jobs = [("a", ("k", {"n": 1})), ("b", ("k", {"n": 2})), ("c", ("k", {"n": 3}))]
    measured = {1: "one", 3: "three"}

    def lookup(kind, params):
        found = measured.get(params["n"])
        return None if found is None else Cached(found, "cpu", "")

    lines = cached_lines(jobs, lookup, lambda label, kind, c: [f"{label}={c.result}", kind])
    assert lines == ["a=one", "k", "c=three", "k"]


def test_warm_jobs_are_the_default_jobs_in_order():
    page = ExpertsLesson()
    assert ExpertsLesson.warm_jobs() == list(page.default_jobs().values())
    assert list(page.default_jobs())[:2] == ["moe, batch 1", "dense, batch 1"]


def test_expected_numbers_read_each_cached_default_job():
    only = ExpertsLesson().default_jobs()["dense, batch 1"]
    point = SimpleNamespace(experts_read=0.0, step_weight_bytes=3 * MIB, tpot_ms=2.5)

    def lookup(kind, params):
        return Cached(point, "cpu: test", "") if (kind, params) == only else None

    assert ExpertsLesson.expected_numbers(lookup) == [
        "dense, batch 1: 0.0 experts read, 3 MiB of weights, TPOT 2.50 ms"]
    assert ExpertsLesson.expected_numbers(lambda kind, params: None) == []


def test_a_lesson_listing_only_warm_jobs_says_when_each_was_measured():
    class Listed(LessonPage):
        @classmethod
        def warm_jobs(cls):
            return [("info", {}), ("sweep_point", {"batch_size": 1})]

    def lookup(kind, params):
        return Cached(None, "cpu: test", "2026-11-23T10:00:00+0000") if kind == "info" else None

    assert Listed.expected_numbers(lookup) == ["info: measured on cpu: test at 2026-11-23 10:00 UTC"]
    assert LessonPage.warm_jobs() == [] and LessonPage.expected_numbers(lookup) == []


def test_every_lesson_gives_no_numbers_before_anything_is_measured():
    for info in LESSONS:  # two clocks measures only live: its one line says so
        lines = lesson_class(info).expected_numbers(lambda kind, params: None)
        assert all("never cached" in line for line in lines), info.slug
