"""The worker builds an engine in steps (engine.lab.jobs.engines.build, engine.steps): a build
stopped between two steps is kept and goes on where it stopped, so a model's build paused for
other readers' short jobs loses nothing, and the engine it ends with is the one a build in one
go makes."""

from __future__ import annotations

import pytest
import torch

from engine.config import get_preset
from engine.generate import generate
from engine.lab.jobs import engines
from engine.lab.jobs.engines import build, engine_for, is_built, put_back, set_aside
from engine.lab.worker import prepare_engine
from engine.model.layers import Linear

KEY = ("tiny", "cpu", "auto", None, True, "fp32", False)  # random weights: no other test's


@pytest.fixture
def fresh_engines():
    kept = (engines._engines, engines._paused, engines._spares, engines._aside)
    saved = [dict(d) for d in kept]
    for d in kept:
        d.clear()
    yield
    for d, s in zip(kept, saved, strict=True):
        d.clear()
        d.update(s)


def test_a_paused_build_goes_on_where_it_stopped(fresh_engines):
    first: list[str] = []
    assert build(KEY, cancelled=lambda: True, on_step=first.append) is None
    assert first == ["weights made"] and not is_built(KEY) and KEY in engines._paused
    rest: list[str] = []
    engine = build(KEY, cancelled=lambda: False, on_step=rest.append)
    assert engine is not None and is_built(KEY) and KEY not in engines._paused
    assert "weights made" not in rest and rest[-1] == "model ready; warming it up"
    assert engine_for(*KEY) is engine  # kept: the job's body finds it
    engines._engines.clear()
    whole = engine_for(*KEY)  # the same settings in one go
    for (name, mine), (_, theirs) in zip(engine.model.state_dict().items(),
                                         whole.model.state_dict().items(), strict=True):
        assert torch.equal(mine, theirs), name
    prompt = [5, 6, 7, 8]
    tokens = [g.seq.output_ids for g in generate(engine, [prompt], 6, ignore_eos=True)]
    assert tokens == [g.seq.output_ids for g in generate(whole, [prompt], 6, ignore_eos=True)]


def test_the_worker_says_it_loads_the_model_and_stops_when_told(fresh_engines):
    params = {"preset": "tiny", "device": "cpu", "backend": "auto", "kv_budget_mib": None,
              "random_weights": True}
    events: list[tuple[str, dict]] = []
    emit = lambda type_, data: events.append((type_, data))  # noqa: E731
    assert not prepare_engine(params, emit, lambda: True)  # paused after its first step
    assert [d["building"] for _, d in events] == [True, True]
    assert events[0][1]["message"] == "loading the tiny model..."
    events.clear()
    assert prepare_engine(params, emit, lambda: False)
    assert events[-1][1] == {"done": 0, "total": 0, "building": False,
                             "message": "loading the tiny model: done; measuring"}
    events.clear()
    assert prepare_engine(params, emit, lambda: True) and events == []  # built: nothing to do
    assert prepare_engine({"preset": "tiny"}, emit, lambda: True)  # no engine params: nothing


def test_jobs_inside_nested_pauses_share_the_paused_jobs_model_and_build_none(
        fresh_engines, monkeypatch):
    """Finding of bench/lab/classroom.py at 30 students: points run inside a paused load test's
    pause built the model again (3 s and more each, with other readers' points waiting), once
    per level of nested pauses. They get a sibling now: the same weights, a pool of their own,
    decoding exactly as the paused job's engine does while that one's blocks stay held."""
    outer = build(KEY)
    prompt = [5, 6, 7, 8]
    reference = [g.seq.output_ids for g in generate(outer, [prompt], 6, ignore_eos=True)]

    def no_model_build(key):
        raise AssertionError("the model was built again inside a pause")

    monkeypatch.setattr(engines, "_engine_steps", no_model_build)
    held = outer.new_sequence([1] * 40, 4, ignore_eos=True)
    outer.reserve(held, 40)  # the paused job's request holds blocks
    assert set_aside(KEY) is outer and is_built(KEY)  # nothing to wait for
    inner = build(KEY)
    assert inner is not outer and inner.model is outer.model and inner.cache is not outer.cache
    assert inner.blocks.num_used == 0 and outer.blocks.num_used > 0
    tokens = [g.seq.output_ids for g in generate(inner, [prompt], 6, ignore_eos=True)]
    assert tokens == reference
    assert set_aside(KEY) is inner  # a job run inside the pause is paused in turn
    innermost = build(KEY)
    assert innermost.model is outer.model and innermost not in (outer, inner)
    engines.fit_kv(innermost, [160] * 48)  # its pool follows its jobs, as the first one's does
    assert innermost.cache.capacity_tokens >= 48 * 160 and outer.blocks.num_used > 0
    assert [g.seq.output_ids for g in generate(innermost, [prompt], 6,
                                               ignore_eos=True)] == reference
    put_back(KEY, inner)
    assert build(KEY) is inner
    put_back(KEY, outer)
    assert build(KEY) is outer and outer.blocks.num_used > 0 and not engines._aside
    outer.release(held)


def test_a_sibling_of_a_paused_block_snapshots_engine_steps_its_own_pool(fresh_engines):
    """block_snapshots (a pausable run) wraps its engine's step to record block tables. A job
    run inside its pause gets a sibling of that engine: the wrapper must not come with it, or the
    sibling's steps would run on the paused job's pool and land in its snapshots."""
    from engine.lab.jobs.serving import record_block_tables

    outer = build(KEY)
    prompt = [5, 6, 7, 8]
    reference = [g.seq.output_ids for g in generate(outer, [prompt], 6, ignore_eos=True)]
    snapshots: list = []
    unwrap = record_block_tables(outer, snapshots)
    held = outer.new_sequence([1] * 40, 4, ignore_eos=True)
    outer.reserve(held, 40)
    assert set_aside(KEY) is outer
    inner = build(KEY)
    assert inner.model is outer.model and "step" not in vars(inner)
    assert [g.seq.output_ids for g in generate(inner, [prompt], 6,
                                               ignore_eos=True)] == reference
    assert snapshots == []  # none of the sibling's steps went through the paused job's wrapper
    put_back(KEY, outer)
    unwrap()
    outer.release(held)


def test_engines_differing_only_in_their_pool_share_one_model_and_count_as_one(
        fresh_engines, monkeypatch):
    """Finding of bench/lab/classroom.py at 30 students: tiny, tiny with block_snapshots' own 2 MiB
    budget and the roofline's small were three engines for two kept, so small was evicted and
    built again for each of its points. A key differing only in its KV budget or prefix caching
    now gets a sibling of the kept model, and the models are what is counted."""
    other = ("tiny", "cpu", "auto", None, False, "fp32", False)  # the trained weights
    first = build(other)
    base = build(KEY)  # random weights: a second model
    built: list[tuple] = []
    real_steps = engines._engine_steps
    monkeypatch.setattr(engines, "_engine_steps", lambda key: built.append(key) or
                        real_steps(key))
    budget = KEY[:3] + (2,) + KEY[4:]
    prefix = KEY[:6] + (True,)
    assert is_built(budget) and is_built(prefix)
    small_pool, cached = build(budget), build(prefix)
    assert built == [] and small_pool.model is base.model and cached.model is base.model
    assert small_pool.cache.allocated_bytes <= 2 * 2**20 and cached.blocks.prefix_caching
    engines.fit_kv(small_pool, [160] * 48)  # an explicit budget is kept
    assert small_pool.cache.allocated_bytes <= 2 * 2**20
    prompt = [5, 6, 7, 8]
    reference = [g.seq.output_ids for g in generate(base, [prompt], 6, ignore_eos=True)]
    for engine in (small_pool, cached):
        assert [g.seq.output_ids for g in generate(engine, [prompt], 6,
                                                   ignore_eos=True)] == reference
    assert build(other) is first and built == []  # two models: both kept
    two = engines.held_bytes(first) + engines.held_bytes(base)
    monkeypatch.setattr(engines, "MAX_MODEL_BYTES", two + engines.held_bytes(base) // 2)
    third = ("tiny", "cpu", "torch", None, True, "fp32", False)  # a third model
    build(third)
    assert built == [third] and not is_built(KEY) and is_built(other)  # the oldest model went


def test_models_are_kept_while_what_they_hold_fits_the_bound_not_by_count(
        fresh_engines, monkeypatch):
    """Three models used in turns (as the quantization lesson's fp32 and int8 beside another
    lesson's model) were each built again at every turn when two were kept; under the bound by
    bytes each is built once. The bound still drops the least recently used, and a model too
    big for it alone is kept alone."""
    keys = [KEY, ("tiny", "cpu", "torch", None, True, "fp32", False),  # another backend
            ("tiny", "cpu", "auto", None, False, "fp32", False)]  # the trained weights
    built: list[tuple] = []
    real_steps = engines._engine_steps
    monkeypatch.setattr(engines, "_engine_steps", lambda key: built.append(key) or
                        real_steps(key))
    for _ in range(3):
        for key in keys:
            build(key)
    assert built == keys  # each once
    model = build(KEY).model  # float32 weights (the head tied), buffers, copies its plan keeps
    held = {key: engines.held_bytes(build(key)) for key in keys}  # KEY the least recent again
    copies = sum(m.weight_t.nbytes for m in model.modules()
                 if isinstance(m, Linear) and m.weight_t is not None)
    buffers = sum(b.nbytes for b in model.buffers())
    assert held[KEY] == get_preset("tiny").params * 4 + buffers + copies
    monkeypatch.setattr(engines, "MAX_MODEL_BYTES", held[KEY] + held[keys[1]])
    build(keys[2])  # the most recent now, with keys[1] and KEY before it: KEY goes
    assert [is_built(k) for k in keys] == [False, True, True]
    monkeypatch.setattr(engines, "MAX_MODEL_BYTES", 1)
    assert build(KEY) is not None and built[-1] == KEY  # built again: nothing else fits
    assert [is_built(k) for k in keys] == [True, False, False]


# ---- the app's first-start set-up (engine.lab.jobs.setup) ---------------------------------------
def test_the_setup_job_builds_the_kernels_and_times_the_plans_in_a_private_cache(
        fresh_engines, tmp_path, monkeypatch, cpp_kernel, int8_kernel):
    """In a cache with nothing in it, the set-up job builds (here: loads, the kernels being in
    this process already) the C++ kernels and builds the preset's engine, which times its plan,
    products and whole step; its progress is on disk for the about page; a second run finds
    everything there and times nothing."""
    from engine.cli.tune import plan_on_disk
    from engine.lab.jobs import setup
    from engine.lab.results import parse_result
    from engine.lab.setup_state import engine_path, read_state

    monkeypatch.setenv("LLM_SPEED_CACHE", str(tmp_path))
    monkeypatch.setattr(setup, "PRESETS", ("draft",))
    assert engine_path() == "plain" and read_state().state == "not started"
    assert not plan_on_disk("draft")
    said: list[dict] = []
    result = setup.setup_job({}, lambda kind, data: said.append(data), lambda: False)
    record = parse_result("setup", result)
    assert record.kernels == "built" and record.path == "fast" and record.presets == ["draft"]
    messages = [d["message"] for d in said]
    assert any("matrix products timed" in m for m in messages)
    assert any("decode steps timed" in m for m in messages)
    assert said[-1]["done"] == said[-1]["total"] == 2
    assert plan_on_disk("draft") and engine_path() == "fast"
    state = read_state()
    assert state.state == "done" and state.kernels == "built"
    built = engines._engines[("draft", "auto", "auto", None, False, "fp32", False)]
    assert built.path == "fast" and built.backend == "cpp"

    engines._engines.clear()
    said.clear()
    assert setup.setup_job({}, lambda kind, data: said.append(data), lambda: False) is not None
    assert not any(" timed" in d["message"] for d in said)  # all on disk now


def test_a_cancelled_setup_stops_and_says_so(fresh_engines, tmp_path, monkeypatch, cpp_kernel,
                                             int8_kernel):
    from engine.lab.jobs import setup
    from engine.lab.setup_state import engine_path, read_state

    monkeypatch.setenv("LLM_SPEED_CACHE", str(tmp_path))
    monkeypatch.setattr(setup, "PRESETS", ("draft",))
    assert setup.setup_job({}, lambda kind, data: None, lambda: True) is None
    assert read_state().state == "stopped" and engine_path() == "plain"


def test_a_result_from_before_the_setup_is_the_plain_paths_under_its_own_cache_key(
        tiny_engine_factory, tmp_path, monkeypatch):
    """An engine on torch's own ops (no kernels yet) measures a point that says "plain"; the
    cache keys it under the plain path, so once the set-up is done the same point is not
    found (it is measured again on the fast path), and a result that says "fast" is kept under
    the fast path's key whatever the path was when it was asked for."""
    from engine.lab.cache import CacheStore
    from engine.lab.jobs.measure import measure_sweep_point
    from engine.lab.results import parse_result
    from engine.lab.setup_state import SetupState, engine_path, write_state

    monkeypatch.setenv("LLM_SPEED_CACHE", str(tmp_path))
    engine = tiny_engine_factory(backend="torch")
    params = {"preset": "tiny", "batch_size": 2, "prompt_len": 8, "new_tokens": 4, "seed": 0}
    result = {**measure_sweep_point(engine, params, lambda *a: None, lambda: False),
              "check": None}
    assert result["path"] == engine.path == "plain"
    assert parse_result("sweep_point", result).path == "plain"

    store = CacheStore(tmp_path / "results")
    asked_plain = CacheStore.key("cpu", "v", "sweep_point", params)
    assert "path" not in asked_plain and engine_path() == "plain"  # the key as before paths
    assert store.put(asked_plain, result, "2026-01-01T00:00:00")
    write_state(SetupState(state="done", path="fast"))
    asked_fast = CacheStore.key("cpu", "v", "sweep_point", params)
    assert asked_fast != asked_plain and asked_fast["path"] == "fast"
    assert store.get(asked_fast) is None and store.nearest(asked_fast) is None
    assert store.get(asked_plain)["result"]["path"] == "plain"

    fast = {**result, "path": "fast"}
    assert store.put(asked_plain, fast, "2026-01-01T00:00:01")  # asked before, measured after
    assert store.get(asked_fast)["result"]["path"] == "fast"
    assert store.get(asked_plain)["result"]["path"] == "plain"


def test_while_the_compiler_runs_the_setup_asks_to_pause_and_can_be_cut_short(monkeypatch):
    """A compile cannot stop half-way: it runs in a thread of its own and the job polls
    cancelled() meanwhile (where the worker pauses it for readers' jobs). The compiler here is
    a stand-in that takes a second and a half."""
    import time

    from engine.lab.jobs import setup

    monkeypatch.setattr(setup, "build_kernel", lambda: time.sleep(1.5))
    monkeypatch.setattr(setup, "TICK_S", 0.5)
    polled, waited = [], []
    assert setup.build_kernels_pausably(lambda: polled.append(1) and False, waited.append)
    assert len(polled) >= 2 and waited and all(s >= 0.5 for s in waited)
    assert setup.build_kernels_pausably(lambda: True, waited.append) is None


def test_while_the_kernels_are_expected_a_plain_model_is_built_without_timing_a_plan(
        fresh_engines, tmp_path, monkeypatch):
    """Before the set-up has built the kernels, a reader's first point must not wait for a
    plain-path plan its engine drops a minute later: the model multiplies as torch lays the
    products out, untimed and labelled plain. Once the set-up says the kernels cannot be built
    (the plain path for good), the plan is timed as before."""
    from engine.lab.setup_state import SETUP_ENV, SetupState, write_state
    from engine.model import matmul_plan

    monkeypatch.setenv("LLM_SPEED_CACHE", str(tmp_path))
    monkeypatch.setenv(SETUP_ENV, "1")
    monkeypatch.setattr(matmul_plan, "available_variants",
                        lambda: tuple(v for v in matmul_plan.VARIANTS if v != "cpp"))
    plain = ("tiny", "cpu", "torch", None, True, "fp32", False)
    said: list[str] = []
    engine = build(plain, on_step=said.append)
    weights = [m.weight for m in engine.model.planned_linears()]
    assert engine.path == "plain" and not matmul_plan.has_plan(weights)
    assert all(m.plan is None for m in engine.model.planned_linears())
    assert not any("timed" in what for what in said)

    engines._engines.clear()
    write_state(SetupState(state="done", kernels="unavailable"))
    engine = build(plain, on_step=said.append)
    assert matmul_plan.has_plan(weights) and engine.model.planned_linears()[0].plan is not None
    assert any("matrix products timed" in what for what in said)
    matmul_plan.plain_plans_untimed(False)


def test_a_timed_result_on_an_engine_says_the_path_it_ran_on():
    """Not only the points: a generation's speed depends on the path too (engine.lab.worker)."""
    from engine.lab.results import parse_result
    from engine.lab.worker import run

    params = {"prompt": "The KV cache", "max_new_tokens": 4}
    record = parse_result("generate", run("generate", params, lambda *a: None, lambda: False))
    assert record.path == engine_for("tiny").path and record.path in ("fast", "plain")
    assert record.to_dict()["path"] == record.path
    assert parse_result("generate", {**record.to_dict(), "path": None}).path is None  # before
