"""The class's records in one SQLite file in the cache directory (class.sqlite): each reader's
predictions, the measurements they were shown, their checkpoint answers, and the class runs'
summaries. Readers are their cookie id (lessons.classroom.recording.reader_id), never a name.

    store = get_store()                              # the process's store, opened on first use
    store.record_prediction("r123", "knob", "Going from batch 1 to 8 ...", "3 to 6 times")
    store.predictions(reader="r123")                 # plain dicts, oldest first

Writes go through one writer thread with a queue, so a page's event loop never waits on the
disk; reads are direct (a WAL file lets them run beside the writer). `flush()` waits for the
queued writes (tests, a download that must include the last click).

The file carries its schema version (table schema_version) and is brought up to date by
MIGRATIONS, SQL steps applied in order, each in its own transaction: a file made by an older
version of the app keeps its rows. A file that is not a database, or one another process holds
locked, gives one clear message (logged once, `store.error`, shown on the report page) and the
store turns into a no-op: the lessons go on without it.
"""

from __future__ import annotations

import json
import logging
import queue
import sqlite3
import threading
import time
from pathlib import Path

from engine.paths import cache_dir

log = logging.getLogger(__name__)

FILE_NAME = "class.sqlite"
BUSY_TIMEOUT_S = 2.0  # how long a statement waits for another connection's lock

# Step i brings a file from version i to i + 1. Append a step; never edit one that has shipped.
MIGRATIONS: tuple[str, ...] = (
    # 1: the reader's three kinds of record
    """
    CREATE TABLE predictions (
        id INTEGER PRIMARY KEY, reader TEXT NOT NULL, lesson TEXT NOT NULL,
        question TEXT NOT NULL, pick TEXT NOT NULL, at TEXT NOT NULL);
    CREATE TABLE shown (
        id INTEGER PRIMARY KEY, reader TEXT NOT NULL, lesson TEXT NOT NULL, what TEXT NOT NULL,
        value REAL, unit TEXT NOT NULL DEFAULT '', n INTEGER, low REAL, high REAL,
        device TEXT NOT NULL DEFAULT '', engine_version TEXT NOT NULL DEFAULT '',
        cached INTEGER NOT NULL DEFAULT 0, measured_at TEXT NOT NULL DEFAULT '',
        at TEXT NOT NULL);
    CREATE TABLE answers (
        id INTEGER PRIMARY KEY, reader TEXT NOT NULL, lesson TEXT NOT NULL,
        question TEXT NOT NULL, answer TEXT NOT NULL, correct INTEGER NOT NULL,
        at TEXT NOT NULL);
    """,
    # 2: which prediction choice a shown measurement supports, and its numbers in words; the
    # class runs' summaries; lookups by reader and by lesson
    """
    ALTER TABLE shown ADD COLUMN choice TEXT;
    ALTER TABLE shown ADD COLUMN detail TEXT NOT NULL DEFAULT '';
    CREATE TABLE class_runs (
        id INTEGER PRIMARY KEY, at TEXT NOT NULL, summary TEXT NOT NULL);
    CREATE INDEX predictions_by_reader ON predictions (reader, lesson);
    CREATE INDEX predictions_by_lesson ON predictions (lesson, question);
    CREATE INDEX shown_by_reader ON shown (reader, lesson);
    CREATE INDEX answers_by_reader ON answers (reader, lesson);
    """,
)
VERSION = len(MIGRATIONS)

SHOWN_FIELDS = ("what", "value", "unit", "n", "low", "high", "device", "engine_version",
                "cached", "measured_at", "choice", "detail")


def now_utc() -> str:
    """'2026-12-02T11:04:05+0000', the engine's own timestamp format (engine.lab.events)."""
    return time.strftime("%Y-%m-%dT%H:%M:%S+0000", time.gmtime())


def schema_version(conn: sqlite3.Connection) -> int:
    """The file's schema version: 0 for a new, empty file."""
    conn.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
    row = conn.execute("SELECT MAX(version) FROM schema_version").fetchone()
    return row[0] or 0


def migrate(conn: sqlite3.Connection, to: int = VERSION) -> int:
    """Apply the missing steps of MIGRATIONS up to version `to`, each in one transaction; the
    version reached. A file newer than this app is left as it is (ValueError)."""
    version = schema_version(conn)
    if version > VERSION:
        raise ValueError(f"the class database is schema version {version}, newer than this "
                         f"app's {VERSION}")
    for step in range(version, to):
        # executescript commits first; BEGIN ... COMMIT makes the step all-or-nothing
        try:
            conn.executescript(f"BEGIN; {MIGRATIONS[step]}; "
                               f"INSERT INTO schema_version (version) VALUES ({step + 1}); COMMIT;")
        except sqlite3.Error:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
    return max(version, to)


def connect(path: Path, timeout: float = BUSY_TIMEOUT_S) -> sqlite3.Connection:
    conn = sqlite3.connect(path, timeout=timeout, check_same_thread=False,
                           isolation_level=None)  # autocommit: each write is its own commit
    conn.row_factory = sqlite3.Row
    return conn


def failure_message(path: Path, error: BaseException) -> str:
    """One sentence for the log and the report page."""
    text = str(error).strip() or type(error).__name__
    if "locked" in text or "busy" in text:
        why = "another program holds it locked"
    elif isinstance(error, sqlite3.DatabaseError):
        why = f"it is not a readable database ({text})"
    else:
        why = text
    then = ("the other program lets go of it" if why.startswith("another")
            else "it is moved away")
    return (f"The class records are off: {path.name} in the cache directory cannot be used "
            f"({why}). The lessons work as usual; predictions, answers and results are not "
            f"kept until {then} and the server is restarted.")


class Store:
    """The class's SQLite file (module docstring). Every method is safe from any thread; a
    store whose file failed records nothing and reads nothing."""

    def __init__(self, path: Path, timeout: float = BUSY_TIMEOUT_S):
        self.path = Path(path)
        self.error = ""  # the message of the failure that turned the store off, or of a write
        self._read_lock = threading.Lock()
        self._queue: queue.Queue = queue.Queue()
        self._reader: sqlite3.Connection | None = None
        self._writer: sqlite3.Connection | None = None
        self._thread: threading.Thread | None = None
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._writer = connect(self.path, timeout)
            self._writer.execute("PRAGMA journal_mode=WAL")
            migrate(self._writer)
            self._reader = connect(self.path, timeout)
            self._reader.execute("SELECT COUNT(*) FROM predictions").fetchone()
        except (sqlite3.Error, ValueError, OSError) as e:
            self._fail(e)
            return
        self._thread = threading.Thread(target=self._write_loop, name="class-store-writer",
                                        daemon=True)
        self._thread.start()

    @property
    def ok(self) -> bool:
        """True while the store records and reads."""
        return self._thread is not None

    def _fail(self, error: BaseException) -> None:
        self.error = failure_message(self.path, error)
        log.error("%s", self.error)
        for conn in (self._writer, self._reader):
            if conn is not None:
                conn.close()
        self._writer = self._reader = None

    # ---- writing (on the writer thread) -----------------------------------------------------
    def _write_loop(self) -> None:
        while True:
            item = self._queue.get()
            try:
                if item is None:
                    return
                sql, args = item
                try:
                    self._writer.execute(sql, args)
                except sqlite3.Error as e:
                    if not self.error:  # once: a full disk or a lock repeats on every write
                        self.error = failure_message(self.path, e)
                        log.error("%s", self.error)
            finally:
                self._queue.task_done()

    def _write(self, sql: str, args: tuple) -> None:
        if self.ok:
            self._queue.put((sql, args))

    def flush(self) -> None:
        """Wait until every queued write is in the file."""
        if self.ok:
            self._queue.join()

    def close(self) -> None:
        """Finish the queued writes and close the file."""
        if not self.ok:
            return
        self._queue.put(None)
        self._thread.join()
        self._thread = None
        with self._read_lock:
            self._reader.close()
        self._writer.close()

    def record_prediction(self, reader: str, lesson: str, question: str, pick: str) -> None:
        self._write("INSERT INTO predictions (reader, lesson, question, pick, at) "
                    "VALUES (?, ?, ?, ?, ?)", (reader, lesson, question, pick, now_utc()))

    def record_answer(self, reader: str, lesson: str, question: str, answer: str,
                      correct: bool) -> None:
        self._write("INSERT INTO answers (reader, lesson, question, answer, correct, at) "
                    "VALUES (?, ?, ?, ?, ?, ?)",
                    (reader, lesson, question, answer, int(bool(correct)), now_utc()))

    def record_shown(self, reader: str, lesson: str, what: str, **fields) -> None:
        """A measurement the reader was shown: `fields` are SHOWN_FIELDS (value, unit, n, low,
        high, device, engine_version, cached, measured_at, choice, detail)."""
        unknown = set(fields) - set(SHOWN_FIELDS)
        if unknown:
            raise TypeError(f"record_shown: unknown fields {sorted(unknown)}")
        fields["what"] = what
        fields["cached"] = int(bool(fields.get("cached", False)))
        names = ["reader", "lesson", *fields, "at"]
        self._write(f"INSERT INTO shown ({', '.join(names)}) VALUES "
                    f"({', '.join('?' * len(names))})",
                    (reader, lesson, *fields.values(), now_utc()))

    def save_class_run(self, summary: dict) -> None:
        """Keep a class run's summary (a JSON-able dict, as the class run returns it)."""
        self._write("INSERT INTO class_runs (at, summary) VALUES (?, ?)",
                    (now_utc(), json.dumps(summary, default=str)))

    # ---- reading (direct) ---------------------------------------------------------------------
    def _read(self, sql: str, args: tuple = ()) -> list[dict]:
        if not self.ok:
            return []
        try:
            with self._read_lock:
                return [dict(row) for row in self._reader.execute(sql, args).fetchall()]
        except sqlite3.Error as e:
            if not self.error:
                self.error = failure_message(self.path, e)
                log.error("%s", self.error)
            return []

    def _by_reader(self, table: str, reader: str | None) -> list[dict]:
        where, args = ("WHERE reader = ?", (reader,)) if reader is not None else ("", ())
        return self._read(f"SELECT * FROM {table} {where} ORDER BY id", args)

    def predictions(self, reader: str | None = None) -> list[dict]:
        """Predictions, oldest first: one reader's, or everyone's."""
        return self._by_reader("predictions", reader)

    def shown(self, reader: str | None = None) -> list[dict]:
        """Shown measurements, oldest first (cached as a bool)."""
        rows = self._by_reader("shown", reader)
        for row in rows:
            row["cached"] = bool(row["cached"])
        return rows

    def answers(self, reader: str | None = None) -> list[dict]:
        """Checkpoint answers, oldest first (correct as a bool)."""
        rows = self._by_reader("answers", reader)
        for row in rows:
            row["correct"] = bool(row["correct"])
        return rows

    def class_runs(self) -> list[dict]:
        """The class runs' summaries, oldest first: {"id", "at", "summary": dict}."""
        rows = self._read("SELECT * FROM class_runs ORDER BY id")
        for row in rows:
            row["summary"] = json.loads(row["summary"])
        return rows

    def pick_counts(self, lesson: str, question: str | None = None,
                    besides: str | None = None) -> dict[str, int]:
        """How many readers picked each choice of a lesson's prediction (a reader's latest pick
        counts once), leaving out the reader `besides` (whose pick the page adds itself: it may
        still be in the writer's queue)."""
        sql = ("SELECT pick, COUNT(*) AS n FROM predictions AS p WHERE lesson = ? "
               "AND id = (SELECT MAX(id) FROM predictions WHERE reader = p.reader "
               "AND lesson = p.lesson AND question = p.question)")
        args: list = [lesson]
        if question is not None:
            sql += " AND question = ?"
            args.append(question)
        if besides is not None:
            sql += " AND reader != ?"
            args.append(besides)
        rows = self._read(sql + " GROUP BY pick", tuple(args))
        return {row["pick"]: row["n"] for row in rows}

    def tally(self, table: str) -> list[dict]:
        """Everyone's latest "predictions" (pick) or "answers" (answer, correct) per lesson and
        question, counted: [{"lesson", "question", "choice", "correct"?, "readers"}], by lesson
        and question. No reader ids: this is what the class's aggregate shows."""
        column, extra = {"predictions": ("pick", ""), "answers": ("answer", ", correct")}[table]
        return self._read(
            f"SELECT lesson, question, {column} AS choice{extra}, COUNT(*) AS readers "
            f"FROM {table} AS t WHERE id = (SELECT MAX(id) FROM {table} WHERE reader = t.reader "
            f"AND lesson = t.lesson AND question = t.question) "
            f"GROUP BY lesson, question, {column}{extra} ORDER BY lesson, question, {column}")

    def deciding(self, lesson: str) -> dict | None:
        """The latest shown measurement of a lesson that says which prediction choice holds."""
        rows = self._read("SELECT * FROM shown WHERE lesson = ? AND choice IS NOT NULL "
                          "ORDER BY id DESC LIMIT 1", (lesson,))
        if not rows:
            return None
        rows[0]["cached"] = bool(rows[0]["cached"])
        return rows[0]


# ---- the process's store ----------------------------------------------------------------------
_store: Store | None = None
_store_lock = threading.Lock()


def get_store() -> Store:
    """The store in this process's cache directory, opened on first use (and again when the
    cache directory changes: each test session has its own)."""
    global _store
    path = cache_dir() / FILE_NAME
    with _store_lock:
        if _store is None or _store.path != path:
            _store = Store(path)
        return _store


def save_class_run(summary: dict) -> None:
    """Keep a class run's summary in the process's store (a no-op when it is off)."""
    get_store().save_class_run(summary)


def reset_store() -> None:
    """Close the process's store, so that the next get_store() opens the file again (what a
    server restart does)."""
    global _store
    with _store_lock:
        if _store is not None:
            _store.close()
        _store = None
