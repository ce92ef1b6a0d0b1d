"""engine.lab.trace: on only when $LLM_SPEED_TRACE names a file (read at import, as the worker
process inherits it); then marks are kept and written in batches, read back in time order; off,
nothing is kept or written."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from engine.lab import trace


@pytest.fixture
def tracing(tmp_path, monkeypatch):
    """Tracing on into a fresh file, as a process started with $LLM_SPEED_TRACE has it."""
    path = tmp_path / "run.trace"
    monkeypatch.setattr(trace, "_path", str(path))
    monkeypatch.setattr(trace, "on", True)
    monkeypatch.setattr(trace, "_lines", [])
    monkeypatch.setattr(trace, "_flushed_at", 0.0)
    return path


@pytest.mark.parametrize("value, on", [("/tmp/x.trace", True), ("", False), (None, False)])
def test_tracing_is_on_only_when_the_variable_names_a_file(value, on):
    env = {k: v for k, v in os.environ.items() if k != trace.ENV}
    if value is not None:
        env[trace.ENV] = value
    out = subprocess.run([sys.executable, "-c", "from engine.lab import trace; print(trace.on)"],
                         env=env, capture_output=True, text=True, check=True).stdout
    assert out.strip() == str(on)


def test_marks_are_written_in_batches_and_read_back_in_order(tracing, monkeypatch):
    # the second due flush comes within FLUSH_EVERY_S of the first however slow the machine
    monkeypatch.setattr(trace, "FLUSH_EVERY_S", 3600.0)
    monkeypatch.setattr(trace, "_flushed_at", float("-inf"))  # never written: the first is due
    trace.mark("got", 7, tag="event", queued=3)
    trace.mark("handled")
    assert not tracing.exists()  # kept until a flush
    trace.flush(due=True)
    trace.mark("send", 8, kind="sweep_point", queued=2)
    trace.flush(due=True)  # within FLUSH_EVERY_S of the last write: kept
    assert [m["what"] for m in trace.read(str(tracing))] == ["got", "handled"]
    trace.flush()
    marks = trace.read(str(tracing))
    assert [(m["what"], m["job"]) for m in marks] == [("got", 7), ("handled", 0), ("send", 8)]
    assert marks[0]["tag"] == "event" and marks[0]["queued"] == 3
    assert marks[0]["pid"] == os.getpid() and marks[0]["t"] <= marks[2]["t"]


def test_off_nothing_is_kept_or_written(tracing, monkeypatch):
    monkeypatch.setattr(trace, "on", False)
    trace.mark("got", 7, tag="event")
    trace.flush()
    assert trace._lines == [] and not tracing.exists()


def test_a_traced_service_marks_both_sides_of_a_job(tracing, tmp_path, monkeypatch):
    """What bench/lab/engine_gaps.py reads of a class: the dispatcher's "got" (a worker message, with
    the queue's length) and "send" (a job to the worker), the worker's "recv" and "done"."""
    from service_helpers import QUICK, TIMEOUT, finished, wait_ready

    from engine.lab.client import EngineService

    monkeypatch.setenv(trace.ENV, str(tracing))  # the worker inherits it
    monkeypatch.setenv("LLM_SPEED_CACHE", str(tmp_path / "cache"))
    service = EngineService(cache_path=tmp_path / "results")
    try:
        assert wait_ready(service, TIMEOUT), service.status()
        job = finished(service.submit("sweep_point", {**QUICK, "seed": 40}, use_cache=False))
        assert job.state == "done"
    finally:
        service.shutdown()
    trace.flush()
    marks = trace.read(str(tracing))
    web = [m for m in marks if m["pid"] == os.getpid()]
    worker = [m for m in marks if m["pid"] != os.getpid()]
    sent = [m for m in web if m["what"] == "send" and m["job"] == job.id]
    assert sent and sent[0]["kind"] == "sweep_point" and sent[0]["queued"] == 0
    assert any(m["what"] == "got" and m["job"] == job.id and m["tag"] == "result" for m in web)
    assert any(m["what"] == "recv" and m["job"] == job.id and m["tag"] == "run" for m in worker)
    assert any(m["what"] == "done" and m["job"] == job.id for m in worker)
