"""The class's SQLite store: a round trip, a migration from a version-1 file, a restart, and a
corrupt or locked file (one clear message, no exception, recording a no-op)."""

from __future__ import annotations

import logging
import sqlite3

import pytest

from lessons.classroom import store as store_module
from lessons.classroom.store import MIGRATIONS, VERSION, Store, migrate, schema_version


@pytest.fixture
def path(tmp_path):
    return tmp_path / "class.sqlite"


def fill(store: Store) -> None:
    store.record_prediction("r1", "knob", "Batch 1 to 8?", "3 to 6 times as many")
    store.record_shown("r1", "knob", "sweep_point: decode step (median)", value=5.2, unit="ms",
                       n=31, low=5.0, high=5.9, device="cpu: Test CPU", engine_version="0.6.0",
                       cached=True, measured_at="2026-11-22T02:48:18+0000", detail="batch_size=8")
    store.record_answer("r1", "knob", "Which doubling gained least?", "4 to 8", True)
    store.save_class_run({"policy": "continuous", "requests": 120, "ttft_p95_ms": 812.5})


def test_a_round_trip_keeps_every_field(path):
    store = Store(path)
    fill(store)
    store.flush()
    [p] = store.predictions("r1")
    assert (p["lesson"], p["question"], p["pick"]) == ("knob", "Batch 1 to 8?",
                                                      "3 to 6 times as many")
    [s] = store.shown("r1")
    assert (s["value"], s["unit"], s["n"], s["low"], s["high"]) == (5.2, "ms", 31, 5.0, 5.9)
    assert (s["device"], s["engine_version"], s["cached"]) == ("cpu: Test CPU", "0.6.0", True)
    assert s["measured_at"] == "2026-11-22T02:48:18+0000" and s["choice"] is None
    [a] = store.answers("r1")
    assert a["answer"] == "4 to 8" and a["correct"] is True
    [run] = store.class_runs()
    assert run["summary"] == {"policy": "continuous", "requests": 120, "ttft_p95_ms": 812.5}
    assert store.predictions("r2") == [] and len(store.predictions()) == 1
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    store.close()


def test_writes_happen_on_the_writer_thread(path, monkeypatch):
    store = Store(path)
    threads = []
    real = store._writer

    class Spy:
        def execute(self, *args):
            import threading
            threads.append(threading.current_thread().name)
            return real.execute(*args)

        def close(self):
            real.close()

    store._writer = Spy()
    store.record_prediction("r1", "knob", "q", "a")
    store.flush()
    assert threads == ["class-store-writer"]
    store.close()


def test_a_reader_counts_once_with_their_latest_pick(path):
    store = Store(path)
    store.record_prediction("r1", "knob", "q", "a")
    store.record_prediction("r1", "knob", "q", "b")  # a reload, a new pick
    store.record_prediction("r2", "knob", "q", "b")
    store.record_prediction("r3", "knob", "q", "a")
    store.record_prediction("r3", "roofline", "q2", "x")
    store.flush()
    assert store.pick_counts("knob") == {"a": 1, "b": 2}
    assert store.pick_counts("knob", besides="r2") == {"a": 1, "b": 1}
    assert store.pick_counts("knob", question="other") == {}
    store.close()


def test_a_version_1_file_is_migrated_and_keeps_its_rows(path):
    with sqlite3.connect(path, isolation_level=None) as conn:
        assert migrate(conn, to=1) == 1
        conn.execute("INSERT INTO predictions (reader, lesson, question, pick, at) "
                     "VALUES ('r9', 'knob', 'q', 'a', '2026-11-01T10:00:00+0000')")
        conn.execute("INSERT INTO shown (reader, lesson, what, value, at) "
                     "VALUES ('r9', 'knob', 'ttft', 12.0, '2026-11-01T10:00:00+0000')")
        columns = {row[1] for row in conn.execute("PRAGMA table_info(shown)")}
        assert "choice" not in columns
    conn.close()
    store = Store(path)
    assert store.ok
    with sqlite3.connect(path) as conn:
        assert schema_version(conn) == VERSION == len(MIGRATIONS) >= 2
    conn.close()
    assert [p["pick"] for p in store.predictions("r9")] == ["a"]
    [old] = store.shown("r9")
    assert old["value"] == 12.0 and old["choice"] is None and old["detail"] == ""
    store.save_class_run({"ok": True})  # a table version 1 did not have
    store.flush()
    assert store.class_runs()[0]["summary"] == {"ok": True} and not store.error
    store.close()


def test_a_file_from_a_newer_app_is_left_alone_with_a_message(path):
    with sqlite3.connect(path, isolation_level=None) as conn:
        migrate(conn)
        conn.execute(f"INSERT INTO schema_version (version) VALUES ({VERSION + 1})")
    conn.close()
    store = Store(path)
    assert not store.ok and "newer than this app" in store.error


def test_the_records_survive_a_restart(path, monkeypatch):
    monkeypatch.setenv("LLM_SPEED_CACHE", str(path.parent))
    store_module.reset_store()
    first = store_module.get_store()
    assert first.path == path
    fill(first)
    store_module.reset_store()  # the server stops: queued writes finish, the file closes
    second = store_module.get_store()
    assert second is not first
    assert [p["pick"] for p in second.predictions("r1")] == ["3 to 6 times as many"]
    assert len(second.shown("r1")) == len(second.answers("r1")) == 1
    store_module.reset_store()


def test_a_corrupt_file_gives_one_clear_message_and_records_nothing(path, caplog):
    path.write_bytes(b"these are not the bytes of a database " * 200)
    with caplog.at_level(logging.ERROR, logger="lessons.classroom.store"):
        store = Store(path)
    assert not store.ok
    assert store.error.startswith("The class records are off: class.sqlite")
    assert "not a readable database" in store.error and "lessons work as usual" in store.error
    assert [r.getMessage() for r in caplog.records] == [store.error]
    fill(store)  # no exception: recording is a no-op
    store.flush()
    assert store.predictions() == store.shown() == store.answers() == []
    assert store.pick_counts("knob") == {} and store.deciding("knob") is None
    store.close()


def test_a_locked_file_gives_one_clear_message_and_records_nothing(path):
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("PRAGMA locking_mode=EXCLUSIVE")
    holder.execute("BEGIN EXCLUSIVE")
    holder.execute("CREATE TABLE held (x)")
    try:
        store = Store(path, timeout=0.2)
        assert not store.ok
        assert "another program holds it locked" in store.error
        fill(store)
        assert store.predictions() == []
    finally:
        holder.close()
    assert Store(path).ok  # once the other program lets go, a restart opens it
