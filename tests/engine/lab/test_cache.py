"""The measurement cache checks what it reads from disk against the typed result records
(engine.lab.results): a malformed entry is discarded (deleted, measured again by the service),
never handed to a page, and reading it never raises. The service-level version, with the worker
measuring the point again, is in test_service.py."""

from __future__ import annotations

import json
import math

import pytest
from cache_entries import DEVICE, KINDS_OF_DAMAGE, entry, malformed, sweep_result

from engine.lab import registry
from engine.lab.cache import CacheStore, distance

VERSION = "0.1.0"


def key_of(kind: str = "sweep_point", **params) -> dict:
    return CacheStore.key(DEVICE, VERSION, kind, registry.normalize(kind, params))


KEY = key_of(batch_size=2)
GOOD = entry(KEY, sweep_result())
TEXT = json.dumps(GOOD)


def test_a_good_entry_is_read_and_kept_in_memory(tmp_path):
    store = CacheStore(tmp_path)
    store._path(KEY).parent.mkdir(parents=True, exist_ok=True)
    store._path(KEY).write_text(TEXT)
    assert store.get(KEY) == GOOD
    store._path(KEY).unlink()
    assert store.get(KEY) == GOOD  # from memory now


@pytest.mark.parametrize("what", KINDS_OF_DAMAGE)
def test_a_malformed_entry_is_discarded_without_raising(tmp_path, what, caplog):
    store = CacheStore(tmp_path)
    path = store._path(KEY)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(malformed(KEY)[what])
    assert store.get(KEY) is None
    assert not path.exists()  # deleted: the next measurement writes a good one
    assert "discarding cache entry" in caplog.text
    store.put(KEY, sweep_result(), "2026-11-21T09:00")
    assert CacheStore(tmp_path).get(KEY)["result"] == sweep_result()


@pytest.mark.parametrize("kind", sorted(registry.JOBS))
def test_every_kinds_entry_is_checked_against_its_own_record(tmp_path, kind):
    store = CacheStore(tmp_path)
    key = key_of(kind)
    path = store._path(key)
    path.parent.mkdir(parents=True, exist_ok=True)
    for result in ({}, {"unexpected": 1}, sweep_result() if kind != "sweep_point" else []):
        path.write_text(json.dumps(entry(key, result)))
        assert store.get(key) is None, (kind, result)
        assert not path.exists()


def test_memory_keeps_the_most_recently_used_entries_only(tmp_path):
    store = CacheStore(tmp_path, memory_entries=2)
    keys = [key_of(batch_size=b) for b in (1, 2, 3)]
    for k in keys:
        store.put(k, sweep_result(), "2026-11-21T09:00")
    assert len(store) == 2
    store._path(keys[0]).unlink()
    assert store.get(keys[0]) is None  # fell out of memory, and its file is gone
    assert store.get(keys[2]) is not None


def test_distance_is_log_ratios_of_numbers_and_infinite_for_other_changes():
    base = registry.normalize("sweep_point", {"batch_size": 8})
    assert distance(base, base) == 0
    assert distance(base, {**base, "batch_size": 16}) == pytest.approx(math.log(2))
    assert distance({**base, "batch_size": 4}, {**base, "batch_size": 16}) == \
        pytest.approx(math.log(4))
    assert distance(base, {**base, "preset": "small"}) == math.inf
    assert distance(base, {**base, "seed": 1}) == math.inf  # from 0: "off" is no number
    serve = registry.normalize("serve_run", {})
    assert distance(serve, {**serve, "prompt_len": [32, 256]}) == pytest.approx(math.log(2))


def test_the_nearest_cached_result_of_the_same_kind_and_device(tmp_path):
    store = CacheStore(tmp_path)
    for b in (2, 32):
        store.put(key_of(batch_size=b), {**sweep_result(), "batch_size": b}, "2026-11-21T09:00")
    store.put(CacheStore.key("cuda: Other", VERSION, "sweep_point",
                             registry.normalize("sweep_point", {"batch_size": 4})),
              {**sweep_result(), "batch_size": 4}, "2026-11-21T09:00")
    fresh = CacheStore(tmp_path)  # reads the keys from disk
    assert fresh.nearest(key_of(batch_size=3))["result"]["batch_size"] == 2
    assert fresh.nearest(key_of(batch_size=24))["result"]["batch_size"] == 32
    assert fresh.nearest(key_of(batch_size=128))["result"]["batch_size"] == 32  # 4x: near
    assert fresh.nearest(key_of(batch_size=129)) is None  # over 4x: not near
    assert fresh.nearest(key_of(batch_size=3, preset="small")) is None
    path = fresh._path(key_of(batch_size=2))
    path.write_text(malformed(key_of(batch_size=2))["a wrong type"])
    assert CacheStore(tmp_path).nearest(key_of(batch_size=3)) is None  # read like get: discarded
    assert not path.exists()
