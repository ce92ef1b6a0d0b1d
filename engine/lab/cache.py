"""The measurement cache: results by their full key, in memory and as one JSON file each on disk.

The key is (device, engine version, job kind, params with the kind's defaults filled in, the
engine's path: engine.lab.setup_state): a classroom moving the same slider measures each point
once, and a result measured by another engine version, on another device or on the plain path
before the engine's set-up is never served as this one's. Only trustworthy results are kept: one
whose disturbance check (engine.lab.quality) says disturbed is refused, and so is one without a
check (measured before results carried one). A stored result keeps its spread and check, so a
page drawing it from the cache shows both. An entry read from disk is checked against its kind's
typed record (engine.lab.results) before anyone sees it: a file that is not JSON, holds another
key, or a result of the wrong shape (a format changed without a version bump, a hand edit, a
truncated write) is deleted and the point measured again, never shown.

`nearest(key)` finds the cached result closest to a key that has none (same device, engine
version, path and kind; every setting that is not a number the same; numbers near, see `distance`), so
a page can show it at once, marked as such, while the exact one is measured.

What stays in memory is bounded by size, not count: this store lives in the web process, which a
classroom's readers share for hours, and a load test's result is up to ~0.8 MB of JSON (~3 MiB as
Python objects) against a sweep point's 1.5 KB. So only the most recently used results up to
MEMORY_BYTES of JSON in all are held, and none over KEEP_AT_MOST; the rest are read from their
file when asked. A result any page still holds is nonetheless served as that same object (a weak
reference, see SharedResult): thirty readers of one load test share one copy, and when they
leave it goes. Torch-free.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import threading
import weakref
from collections import OrderedDict
from pathlib import Path

from ..errors import ResultError
from ..paths import write_text_atomic
from .results import RESULTS, Measured, parse_result
from .setup_state import PATHS, engine_path

log = logging.getLogger(__name__)

NEARBY_WITHIN = math.log(4)  # the farthest a nearby result may be (see distance): 4x in one number
MEMORY_BYTES = 512 * 1024  # JSON text of the results held in memory, in all (~2 MiB of objects)
KEEP_AT_MOST = MEMORY_BYTES // 8  # one bigger (a serve run, a load test) is read from its file


class SharedResult(dict):
    """A result as the cache hands it out: a dict the cache can refer to weakly, so that while
    any page holds it a hit gets the same object, not a second copy from the file. The service
    wraps a measured result in it before storing and delivering it."""

    __slots__ = ("__weakref__",)


def distance(a: dict, b: dict) -> float:
    """How far apart two parameter sets of one kind are: the sum over numeric settings of
    |log(a / b)| (batch 8 is as near 16 as 16 is to 32); infinite if any other setting differs,
    or a number differs where one of them is 0 or negative (0 often means "off")."""
    total = 0.0
    for name in a.keys() | b.keys():
        x, y = a.get(name), b.get(name)
        if x == y:
            continue
        if isinstance(x, list) and isinstance(y, list) and len(x) == len(y):
            total += sum(distance({"v": u}, {"v": v}) for u, v in zip(x, y))
        elif (isinstance(x, (int, float)) and isinstance(y, (int, float))
              and not isinstance(x, bool) and not isinstance(y, bool) and x > 0 and y > 0):
            total += abs(math.log(x / y))
        else:
            return math.inf
    return total


def disturbed(result: dict) -> bool:
    """Whether a result's disturbance check says other work disturbed it."""
    check = result.get("check") if isinstance(result, dict) else None
    return isinstance(check, dict) and bool(check.get("disturbed"))


def trustworthy(result: dict, kind: str | None = None) -> bool:
    """A result the cache may keep and serve: it has a check (None for a kind that times
    nothing; none at all for a kind whose record carries no check), and the check does not say
    disturbed."""
    if not isinstance(result, dict) or disturbed(result):
        return False
    record = RESULTS.get(kind)
    return "check" in result or (record is not None and not issubclass(record, Measured))


def with_path(key: dict, path: str) -> dict:
    """The key for a result measured on `path`: "path" only for the fast one."""
    plain = {k: v for k, v in key.items() if k != "path"}
    return {**plain, "path": path} if path == "fast" else plain


class CacheStore:
    """Measured results by full key, as one JSON file each on disk and, the most recently used up
    to `memory_bytes` of JSON (none over `keep_at_most`), in memory."""

    def __init__(self, directory: Path, memory_bytes: int = MEMORY_BYTES,
                 keep_at_most: int = KEEP_AT_MOST):
        self.directory = directory
        self.memory_bytes = memory_bytes
        self.keep_at_most = keep_at_most
        self._memory: OrderedDict[str, tuple[dict, int]] = OrderedDict()  # name -> (record, size)
        self._held = 0  # the sizes in _memory, summed
        self._alive: weakref.WeakValueDictionary[str, SharedResult] = \
            weakref.WeakValueDictionary()  # name -> a result someone still holds
        self._measured: dict[str, tuple[str, str]] = {}  # name -> (device, measured_at) of those
        self._keys: dict[str, dict[str, dict]] = {}  # kind -> {file name: key}, once scanned
        self._lock = threading.Lock()

    @staticmethod
    def key(device: str, engine_version: str, kind: str, params: dict) -> dict:
        """A result's full key, with the engine's path now (engine.lab.setup_state): a result
        of the plain path is never served as the fast path's. The plain path's key is the key
        as it was before paths (no "path"), so caches written before it keep answering."""
        return with_path({"device": device, "engine_version": engine_version, "kind": kind,
                          "params": params}, engine_path())

    def _path(self, key: dict) -> Path:
        text = json.dumps(key, sort_keys=True, separators=(",", ":"))
        digest = hashlib.sha256(text.encode()).hexdigest()[:32]
        return self.directory / f"{key['kind']}-{digest}.json"

    def get(self, key: dict) -> dict | None:
        """The stored record {"key", "result", "device", "measured_at"} or None."""
        path = self._path(key)
        with self._lock:
            record = self._in_memory(str(path), key)
        if record is not None:
            return record
        try:
            text = path.read_text()
        except OSError:
            return None  # not measured yet (or unreadable: measured again and rewritten)
        try:
            record = self.entry(text, key)
        except ResultError as e:
            log.warning("discarding cache entry %s: %s", path.name, e)
            try:
                path.unlink(missing_ok=True)
            except OSError:  # a read-only cache: the fresh result is kept in memory instead
                pass
            return None
        if not trustworthy(record["result"], key["kind"]):
            return None  # measured before checks, or disturbed (planted by hand): measure again
        record["result"] = SharedResult(record["result"])
        self._remember(str(path), record, len(text))
        return record

    def _in_memory(self, name: str, key: dict) -> dict | None:
        """The record held for name, or rebuilt around the result someone still holds; None if
        neither (call with the lock held)."""
        held = self._memory.get(name)
        if held is not None:
            self._memory.move_to_end(name)
            return held[0]
        result = self._alive.get(name)
        if result is None:
            return None
        device, measured_at = self._measured[name]
        return {"key": key, "result": result, "device": device, "measured_at": measured_at}

    def nearest(self, key: dict, within: float = NEARBY_WITHIN) -> dict | None:
        """The stored record closest to key (same device, engine version and kind; see
        `distance`, at most `within`), checked like `get`; None if there is none near."""
        keys = self._keys_of(key["kind"])
        candidates = sorted(
            (distance(key["params"], k["params"]), name, k) for name, k in list(keys.items())
            if k["device"] == key["device"] and k["engine_version"] == key["engine_version"]
            and k.get("path", "plain") == key.get("path", "plain"))
        for far, name, other in candidates:
            if far > within:
                break
            if far == 0:
                continue  # the key itself: get() would have answered
            record = self.get(other)
            if record is not None:
                return record
            keys.pop(name, None)  # gone or malformed
        return None

    def _keys_of(self, kind: str) -> dict[str, dict]:
        """The keys of a kind's files on disk (read once, then kept up to date by put)."""
        with self._lock:
            known = self._keys.get(kind)
        if known is not None:
            return known
        known = {}
        for path in sorted(self.directory.glob(f"{kind}-*.json")):
            try:
                key = json.loads(path.read_text()).get("key")
            except (OSError, ValueError, AttributeError):
                continue
            if isinstance(key, dict) and isinstance(key.get("params"), dict) \
                    and self._path(key) == path:
                known[path.name] = key
        with self._lock:
            return self._keys.setdefault(kind, known)

    @staticmethod
    def entry(text: str, key: dict) -> dict:
        """A cache file's record, if it is this key's and its result has the kind's shape;
        a ResultError saying what is wrong otherwise."""
        try:
            record = json.loads(text)
        except ValueError as e:
            raise ResultError(f"not JSON ({e})") from None
        if not isinstance(record, dict):
            raise ResultError(f"not an object (got {type(record).__name__})")
        if record.get("key") != key:
            raise ResultError("it holds another key's result")
        for name in ("device", "measured_at"):
            if not isinstance(record.get(name), str):
                raise ResultError(f"its {name} is missing or not text")
        if "result" not in record:
            raise ResultError("it has no result")
        parse_result(key["kind"], record["result"])  # ResultError naming the field
        return record

    def put(self, key: dict, result: dict, measured_at: str) -> bool:
        """Keep a result (in memory and on disk); False, keeping nothing, if it is not
        trustworthy (disturbed, or without a check). A result that says its path is kept
        under that path's key, whatever the path was when it was asked for."""
        if isinstance(result, dict) and result.get("path") in PATHS:
            key = with_path(key, result["path"])
        if not trustworthy(result, key["kind"]):
            log.info("not caching a %s result: %s", key["kind"],
                     "disturbed" if disturbed(result) else "it has no disturbance check")
            return False
        record = {"key": key, "result": result, "device": key["device"],
                  "measured_at": measured_at}
        text = json.dumps(record)
        path = self._path(key)
        self._remember(str(path), record, len(text))
        with self._lock:
            if key["kind"] in self._keys:
                self._keys[key["kind"]][path.name] = key
        try:
            write_text_atomic(path, text)
        except OSError as e:  # a full or read-only disk costs the cache, not the result
            log.warning("could not write %s: %s", path, e)
        return True

    def _remember(self, name: str, record: dict, size: int) -> None:
        """Hold record in memory if it is small enough, the least recently used making room;
        and refer to its result weakly if it is a SharedResult (one too big, or no longer
        held, is still served from memory while someone has it)."""
        with self._lock:
            old = self._memory.pop(name, None)
            self._held -= old[1] if old else 0
            if size <= self.keep_at_most:
                self._memory[name] = (record, size)
                self._held += size
            while self._held > self.memory_bytes:
                _, (_, freed) = self._memory.popitem(last=False)  # still on disk
                self._held -= freed
            if isinstance(record["result"], SharedResult):
                self._alive[name] = record["result"]
                self._measured[name] = (record["device"], record["measured_at"])
                for gone in self._measured.keys() - self._alive.keys():
                    del self._measured[gone]

    @property
    def memory_used(self) -> int:
        """The JSON size of the results held in memory (at most memory_bytes)."""
        with self._lock:
            return self._held

    def __len__(self) -> int:
        """How many results are in memory: held, or still referred to by someone."""
        with self._lock:
            return len(self._memory.keys() | self._alive.keys())
