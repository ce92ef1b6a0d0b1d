"""The registry states how long each kind takes at given params (engine.lab.registry Bound;
bench/lab/job_bounds.py times them). Here the tiny-preset bounds run at exactly those params, and the
test checks the size of the work they did (batch, steps, tokens, requests), not its time: a change
that makes a lesson's job bigger than its stated bound shows up here, and the bound has to be
measured again."""

from __future__ import annotations

import pytest

from engine.config import PRESETS
from engine.lab.registry import JOBS
from engine.lab.results import parse_result
from engine.lab.worker import run
from engine.sweep import WARMUP_STEPS

TINY_BOUNDS = [(kind, bound) for kind, spec in JOBS.items() for bound in spec.bounds
               if not kind.startswith("endpoint_")  # the teacher's server sets their pace
               and spec.check(bound.at).get("preset", "tiny") == "tiny"
               and spec.size != "load"  # load tests are the bench's (20 s and more)
               and kind != "invariance"]  # batch sizes up to 65, row by row: the bench's too


def run_at(kind: str, params: dict):
    return parse_result(kind, run(kind, params, lambda *_: None, lambda: False))


@pytest.mark.parametrize("kind, bound", TINY_BOUNDS, ids=[b.what for _, b in TINY_BOUNDS])
def test_a_bound_is_stated_for_the_work_its_params_ask_for(kind, bound, request):
    if kind.startswith("int8_"):
        request.getfixturevalue("int8_kernel")  # int8 weights need their kernel built
    params = JOBS[kind].check(bound.at)
    result = run_at(kind, bound.at)
    if kind == "sweep_point":
        assert result.batch_size == params["batch_size"]
        assert result.prompt_len == params["prompt_len"]
        assert result.decode_steps_timed == params["new_tokens"] - 1 - WARMUP_STEPS
    elif kind == "generate":
        assert 1 <= len(result.tokens) <= params["max_new_tokens"]
    elif kind == "two_clocks":
        assert 1 <= result.metrics.output_tokens <= params["max_new_tokens"]
        assert result.background == params["background"]
    elif kind in ("serve_run", "block_snapshots"):
        long = params.get("workload") == "interference"  # the decoding requests and the long one
        assert len(result.requests) == params["requests"] + long
        assert all(r.finish_s is not None for r in result.requests)
        if kind == "serve_run":
            lo, hi = params["output_len"]
            assert all(lo <= r.output_len <= hi and 1 <= len(r.token_s) <= r.output_len
                       for r in result.requests if r.prompt_len < params["long_prompt_len"])
    elif kind == "prefix_cache":
        assert len(result.requests) == params["requests"]
        assert result.shared_prefix_len == params["shared_prefix_len"]
        assert result.prefix_cache == params["prefix_cache"]
    elif kind == "speculative":
        assert result.batch_size == params["batch_size"] and result.method == params["method"]
        assert all(1 <= len(ids) <= params["new_tokens"] for ids in result.output_ids)
    elif kind == "int8_point":
        assert result.batch_size == params["batch_size"]
        assert result.weight_format == params["weight_format"]
        assert result.decode_steps_timed == params["new_tokens"] - 1 - WARMUP_STEPS
    elif kind == "int8_quality":
        assert result.windows == params["windows"]
        assert result.positions == params["windows"] * params["seq_len"]
    elif kind == "kv_allocation":
        assert {row.preset for row in result.caches} == set(PRESETS)
    elif kind == "info":
        assert result.memory_bandwidth_gbs > 0
    elif kind == "kv_formats":
        assert [f.steps_timed for f in result.formats] == \
            [params["new_tokens"] - 1 - WARMUP_STEPS] * 2
        assert result.quality.windows == params["windows"]
        assert len(result.hybrid) == 2 * len(params["contexts"])
    else:
        pytest.fail(f"no size check for {kind}: add one with its bound")


def test_every_kind_states_a_bound_and_the_load_tests_are_left_to_the_bench():
    endpoint_kinds = {kind for kind in JOBS if kind.startswith("endpoint_")}
    # sweep_point's bound is the knob's largest point on the mini preset (a memory-bound model):
    # a size the bench times (bench/lab/job_bounds.py), too slow to build and tune here; so is
    # experts_point's (moe-mini at batch 64)
    assert {kind for kind, _ in TINY_BOUNDS} | {"prefill_point", "load_test", "rate_sweep",
                                                 "capacity_search", "sweep_point",
                                                 "experts_point", "traffic_classes", "invariance",
                                                 "disaggregation"} \
        | endpoint_kinds | {"setup", "class_run"} == set(JOBS)  # setup: the app's own first
    # start; class_run: as long as the teacher keeps it
