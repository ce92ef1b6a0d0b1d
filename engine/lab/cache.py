"""The measurement cache: results by their full key, in memory and as one JSON file each on disk.

The key is (device, engine version, job kind, params with the kind's defaults filled in): a
classroom moving the same slider measures each point once, and a result measured by another
engine version or on another device is never served. Torch-free.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
from pathlib import Path

from ..paths import write_json_atomic

log = logging.getLogger(__name__)


class CacheStore:
    """Measured results by full key, in memory and as one JSON file each on disk."""

    def __init__(self, directory: Path):
        self.directory = directory
        self._memory: dict[str, dict] = {}
        self._lock = threading.Lock()

    @staticmethod
    def key(device: str, engine_version: str, kind: str, params: dict) -> dict:
        return {"device": device, "engine_version": engine_version, "kind": kind,
                "params": params}

    def _path(self, key: dict) -> Path:
        text = json.dumps(key, sort_keys=True, separators=(",", ":"))
        digest = hashlib.sha256(text.encode()).hexdigest()[:32]
        return self.directory / f"{key['kind']}-{digest}.json"

    def get(self, key: dict) -> dict | None:
        """The stored record {"key", "result", "device", "measured_at"} or None."""
        path = self._path(key)
        with self._lock:
            record = self._memory.get(str(path))
        if record is not None:
            return record
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError):
            return None
        if not isinstance(record, dict) or record.get("key") != key or "result" not in record:
            return None  # another key's file, or an older format: measure again
        with self._lock:
            self._memory[str(path)] = record
        return record

    def put(self, key: dict, result: dict, measured_at: str) -> None:
        record = {"key": key, "result": result, "device": key["device"],
                  "measured_at": measured_at}
        path = self._path(key)
        with self._lock:
            self._memory[str(path)] = record
        try:
            write_json_atomic(path, record)
        except OSError as e:  # a full or read-only disk costs the cache, not the result
            log.warning("could not write %s: %s", path, e)

    def __len__(self) -> int:
        with self._lock:
            return len(self._memory)
