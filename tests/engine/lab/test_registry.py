"""The job registry (engine.lab.registry), its parameter types (engine.lab.params) and the typed
result records (engine.lab.results): the parts of the service the web process imports."""

from __future__ import annotations

import math
import re

import pytest
from cache_entries import sweep_result

from engine.errors import ConfigError, ResultError
from engine.lab import registry
from engine.lab.cache import CacheStore
from engine.lab.events import JobEvent
from engine.lab.params import Bool, Choice, Float, Int, Lengths, Many, Optional, Rate, Text
from engine.lab.results import (
    RESULTS,
    Percentiles,
    RunMetrics,
    SweepPointResult,
    parse_result,
)


def test_the_cache_key_of_the_defaults_is_what_it_was(tmp_path):
    """Caches written before the registry existed must keep answering: the file names of two
    kinds' keys, as the code before the registry computed them, are pinned here."""
    params = registry.normalize("sweep_point", {})
    assert params == {"preset": "tiny", "device": "auto", "backend": "auto",
                      "kv_budget_mib": None, "random_weights": False, "batch_size": 1,
                      "prompt_len": 128, "new_tokens": 32, "seed": 0}
    store = CacheStore(tmp_path)
    key = CacheStore.key("cpu: Test (2 cores)", "0.1.0", "sweep_point", params)
    assert store._path(key).name == "sweep_point-bb488e2bf8c6139d9fb92173db498398.json"
    serve = registry.normalize("serve_run", {"policy": "static"})
    assert serve["rate"] == "inf" and serve["prompt_len"] == [32, 128]  # kept as given
    key = CacheStore.key("cpu: Test (2 cores)", "0.1.0", "serve_run", serve)
    assert store._path(key).name == "serve_run-f7c6741bde7f1cfe4faac9b87494f5dc.json"


def test_a_parameter_added_later_is_left_out_of_the_key_at_its_default():
    plain = registry.normalize("sweep_point", {})
    assert registry.normalize("sweep_point", {"shared_prompt": False}) == plain
    assert registry.normalize("sweep_point", {"shared_prompt": True}) == \
        {**plain, "shared_prompt": True}
    assert registry.get_spec("sweep_point").check({})["shared_prompt"] is False  # the body's


def test_normalize_keeps_values_as_given_and_refuses_unknown_names():
    assert registry.normalize("sweep_point", {"batch_size": 4.0})["batch_size"] == 4.0
    with pytest.raises(ValueError, match="unknown parameter 'batch'"):
        registry.normalize("sweep_point", {"batch": 4})
    with pytest.raises(ValueError, match="unknown job kind"):
        registry.get_spec("nope")


def test_check_gives_the_body_its_values_in_their_types():
    checked = registry.get_spec("serve_run").check({"rate": "inf", "prompt_len": 64,
                                                     "max_batch": 4.0})
    assert checked["rate"] == math.inf and checked["prompt_len"] == (64, 64)
    assert checked["max_batch"] == 4 and isinstance(checked["max_batch"], int)
    with pytest.raises(ConfigError, match="prompt_len must be between 1 and 2047"):
        registry.get_spec("prefill_point").check({"prompt_len": 4096})
    assert registry.get_spec("prefill_point").check({"preset": "large",
                                                     "prompt_len": 4000})["prompt_len"] == 4000


def test_every_body_is_named_by_an_import_path_in_the_jobs_package():
    for spec in registry.JOBS.values():
        module, _, name = spec.body.partition(":")
        assert module.startswith("engine.lab.jobs.") and name.endswith("_job"), spec.body
        assert RESULTS[spec.kind] is spec.result


@pytest.mark.parametrize("param, value, words", [
    (Int(lo=1, hi=4), 0, "x must be between 1 and 4 (got 0)"),
    (Int(lo=1), True, "x must be a whole number"),
    (Int(lo=1), 1.5, "x must be a whole number"),
    (Float(lo=0.0, above=True), 0.0, "x must be above 0.0"),
    (Float(lo=0.0), math.nan, "x must be a number"),
    (Choice(choices=("a", "b")), "c", "x must be one of a, b (got 'c')"),
    (Bool(), "yes", "x must be true or false (got 'yes')"),
    (Text(what="the prompt", max_chars=3), "  ", "the prompt is empty"),
    (Text(what="the prompt", max_chars=3), "abcd", "longer than 3 characters"),
    (Lengths(hi=10), [5, 20], "x range 5:20 must satisfy 1 <= A <= B <= 10"),
    (Lengths(), 5, r"x must be [A, B] in tokens"),
    (Lengths(single=True), [3, 2], "x range 3:2 must satisfy 1 <= A <= B"),
    (Rate(lo=0.5), 0.1, "x must be at least 0.5"),
    (Many(each=Float(lo=1.0), each_name="rate", max_items=2, what="rates"), [], "1 to 2 rates"),
    (Many(each=Float(lo=1.0), each_name="rate", max_items=2, what="rates"), [0.5], "rate must be"),
    (Optional(of=Int(lo=1)), 0, "x must be at least 1"),
])
def test_each_parameter_type_names_the_limit(param, value, words):
    with pytest.raises(ConfigError, match=re.escape(words)):
        param.check(value, "x")


def test_parameter_types_parse_command_line_text():
    assert Int(lo=1).parse("3", "n") == 3
    assert Lengths(single=True).parse("4:9", "prompt length") == (4, 9)
    assert Rate().parse("inf", "rate") == math.inf
    with pytest.raises(ConfigError, match="n must be a whole number"):
        Int(lo=1).parse("many", "n")
    assert Optional(of=Int(lo=1)).check(None, "x") is None


def test_a_record_reads_a_result_dict_and_gives_it_back():
    data = sweep_result()
    record = SweepPointResult.from_dict(data)
    assert record.tpot_ms == 1.5 and record.batch_size == 2
    assert record.to_dict() == data
    assert parse_result("sweep_point", data) == record


@pytest.mark.parametrize("change, words", [
    (lambda d: d.pop("tpot_ms"), "sweep_point result has no field 'tpot_ms'"),
    (lambda d: d.update(tpot_ms="fast"), "sweep_point result: tpot_ms must be a number"),
    (lambda d: d.update(batch_size=2.5), "batch_size must be a whole number"),
    (lambda d: d.update(batch_size=True), "batch_size must be a whole number"),
    (lambda d: d.update(extra=1), "unknown field 'extra'"),
])
def test_a_malformed_result_is_refused_naming_the_field(change, words):
    data = sweep_result()
    change(data)
    with pytest.raises(ResultError, match=words):
        SweepPointResult.from_dict(data)


def test_nested_records_name_the_path_to_a_bad_field():
    empty = {"mean": None, "p50": None, "p90": None, "p95": None, "p99": None, "max": None,
             "count": 0}
    metrics = {name: dict(empty) for name in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms",
                                              "queue_ms")}
    metrics.update(throughput_tok_s=None, requests_per_s=None, goodput_rps=None, completed=0,
                   output_tokens=0, duration_s=None, slo_ttft_ms=None, slo_tpot_ms=None,
                   requests_meeting_slo=None, preemptions=0, slot_use=None)
    assert RunMetrics.from_dict(metrics).ttft_ms == Percentiles(None, None, None, None, None,
                                                                None, 0)
    metrics["itl_ms"]["p99"] = "slow"
    with pytest.raises(ResultError, match="itl_ms: p99 must be a number"):
        RunMetrics.from_dict(metrics)
    with pytest.raises(ResultError, match="no result record"):
        parse_result("nope", {})


def test_a_result_event_carries_its_record():
    event = JobEvent(1, "sweep_point", "result", sweep_result(), cached=True)
    assert isinstance(event.result, SweepPointResult) and event.result.kv_bytes == 4096
    with pytest.raises(ValueError, match="a progress event has no result"):
        _ = JobEvent(1, "sweep_point", "progress", {}).result
