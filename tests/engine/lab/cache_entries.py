"""A well-formed result, and every way a measurement-cache file can be wrong for a given key: the
cache tests plant these (test_cache.py on the store alone, test_service.py with the worker);
test_registry.py reads the result with its record."""

from __future__ import annotations

import json

DEVICE = "cpu: Test (2 cores)"


def sweep_result() -> dict:
    """A well-formed sweep_point result (engine.lab.results.SweepPointResult)."""
    return {"device": "cpu", "preset": "tiny", "weights": "trained", "backend": "torch",
            "weight_bytes": 1000, "batch_size": 2, "ttft_ms": 5.0, "tpot_ms": 1.5,
            "tokens_per_s": 1333.3, "kv_bytes": 4096, "prompt_len": 8, "new_tokens": 6,
            "decode_steps_timed": 3, "step_ms_p10": 1.4, "step_ms_p90": 1.6,
            "bytes_per_step": 2000, "achieved_gbs": 1.3, "flops_per_step": 4e6,
            "prefill_tokens_per_s": 3200.0, "spread": None, "check": None}


def entry(key: dict, result) -> dict:
    return {"key": key, "result": result, "device": key["device"],
            "measured_at": "2026-11-20T10:00:00+0000"}


def _without(d: dict, name: str) -> dict:
    return {k: v for k, v in d.items() if k != name}


def malformed(key: dict) -> dict[str, str]:
    """(what is wrong -> the file's text) for a sweep_point key; each must be discarded."""
    good = entry(key, sweep_result())
    text = json.dumps(good)
    other = {**key, "params": {**key["params"], "batch_size": key["params"]["batch_size"] + 1}}
    result = sweep_result()
    return {
        "truncated JSON": text[: len(text) // 2],
        "empty file": "",
        "not an object": json.dumps([good]),
        "another key's file": json.dumps(entry(other, result)),
        "no key": json.dumps(_without(good, "key")),
        "no result": json.dumps(_without(good, "result")),
        "no measured_at": json.dumps(_without(good, "measured_at")),
        "device not text": json.dumps({**good, "device": 3}),
        "result not an object": json.dumps(entry(key, [1, 2])),
        "result of another kind": json.dumps(entry(key, {"device": "cpu", "blocks": 4,
                                                         "block_size": 16, "caches": []})),
        "a field missing": json.dumps(entry(key, _without(result, "batch_size"))),
        "a field renamed": json.dumps(entry(key, {**_without(result, "batch_size"),
                                                  "batch": 2})),
        "a wrong type": json.dumps(entry(key, {**result, "tpot_ms": "fast"})),
        "a whole number as text": json.dumps(entry(key, {**result, "batch_size": "2"})),
        "null where a number is due": json.dumps(entry(key, {**result, "ttft_ms": None})),
    }


KINDS_OF_DAMAGE = sorted(malformed({"device": DEVICE, "params": {"batch_size": 1}}))
