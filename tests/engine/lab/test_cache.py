"""The measurement cache checks what it reads from disk against the typed result records
(engine.lab.results): a malformed entry is discarded (deleted, measured again by the service),
never handed to a page, and reading it never raises. The service-level version, with the worker
measuring the point again, is in test_service.py."""

from __future__ import annotations

import gc
import json
import math

import pytest
from cache_entries import DEVICE, KINDS_OF_DAMAGE, entry, malformed, sweep_result

from engine.lab import registry
from engine.lab.cache import CacheStore, SharedResult, distance

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
    size = len(json.dumps(entry(key_of(batch_size=1), sweep_result())
                          | {"measured_at": "2026-11-21T09:00"}))  # as put writes it
    store = CacheStore(tmp_path, memory_bytes=2 * size + size // 2)  # room for two
    keys = [key_of(batch_size=b) for b in (1, 2, 3)]
    for k in keys:
        store.put(k, sweep_result(), "2026-11-21T09:00")
    assert len(store) == 2 and store.memory_used == 2 * size
    store._path(keys[0]).unlink()
    assert store.get(keys[0]) is None  # fell out of memory, and its file is gone
    assert store.get(keys[2]) is not None


def generate_result(tokens: int) -> dict:
    """A well-formed generate result with `tokens` timed tokens: a big entry (~0.3 MB of JSON at
    8000, a load test's per-request records make up to ~0.8 MB)."""
    return {"device": "cpu", "preset": "tiny", "weights": "trained", "prompt": "Once",
            "prompt_tokens": 1, "text": " and" * tokens, "ttft_ms": 5.0, "tpot_ms": 1.5,
            "tokens": [{"text": " and", "t_s": 0.005 + 0.0015 * i} for i in range(tokens)],
            "spread": None, "check": None}


def test_what_stays_in_memory_is_bounded_by_size_not_count(tmp_path):
    """The store lives in the web process for a whole class: a few big results (a load test's
    JSON is up to ~0.8 MB, ~3 MiB as objects) must not stay because they are few, while small
    ones fill the budget."""
    store = CacheStore(tmp_path)
    big = [key_of("generate", max_new_tokens=t) for t in range(8000, 8008)]
    for k in big:
        store.put(k, generate_result(8000), "2026-11-21T09:00")  # ~0.3 MB of JSON each
    assert store.memory_used == 0 and len(store) == 0  # over keep_at_most: none held
    for k in big:
        assert len(store.get(k)["result"]["tokens"]) == 8000  # from its file
    assert len(store) == 0  # and not held after it either (no one kept the result)
    small = [key_of(batch_size=b) for b in range(100, 1100)]
    for k in small:
        store.put(k, sweep_result(), "2026-11-21T09:00")
    assert 0.9 * store.memory_bytes < store.memory_used <= store.memory_bytes
    assert 0 < len(store) < len(small)


def test_a_result_a_reader_still_holds_is_served_as_the_same_object(tmp_path):
    """Thirty readers hitting one big result share one copy while any of them holds it (the
    service delivers the SharedResult it stored); once none does, a hit reads its file."""
    store = CacheStore(tmp_path)
    key = key_of("generate")
    held = SharedResult(generate_result(8000))
    store.put(key, held, "2026-11-21T09:00")
    assert store.memory_used == 0 and len(store) == 1  # too big to hold, but someone has it
    record = store.get(key)
    assert record["result"] is held and record["measured_at"] == "2026-11-21T09:00"
    assert record == entry(key, held) | {"measured_at": "2026-11-21T09:00"}
    del held, record
    gc.collect()
    assert len(store) == 0
    first = store.get(key)["result"]  # read from its file: a SharedResult, shared from now on
    assert store.get(key)["result"] is first and first == generate_result(8000)
    store._path(key).unlink()
    assert store.get(key)["result"] is first  # while held, without the file
    del first
    gc.collect()
    assert store.get(key) is None


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
