"""`python -m engine tune`: the lessons' models' plans timed and the machine's limits measured at
set-up, where the lab's worker reads them, so no reader's first engine times one and no page's
`info` job measures the machine; bad input and failures in one line each."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

from engine.cli.tune import LESSON_PRESETS

# What the lab's worker does before its first job (engine.lab.worker.isolate), then an engine's
# build: prints each step's words, so a plan timed here (not found on disk) shows.
BUILD_AS_THE_WORKER = (
    "import sys; from engine.lab.worker import isolate; from engine.llm_engine import "
    "LLMEngine; from engine.config import EngineConfig; isolate(None, None); "
    "[print(step) for step in LLMEngine.build_steps(EngineConfig(preset=sys.argv[1], "
    "device='cpu'))]")


# The worker's `info` job's machine description: its check (None when read from disk) and
# bandwidth, as tune prints it
INFO_AS_THE_WORKER = (
    "from engine.lab.worker import isolate; from engine.lab.jobs.machine import machine_info; "
    "isolate(None, None); m = machine_info(); print(m['check'], f\"{m['memory_bandwidth_gbs']:.1f}\")")

# Limits kept as a quiet `tune` keeps them, under the key the worker reads (its cores and
# threads): for a set-up whose own measurement was disturbed, so the reading path is still tested
PLANT_LIMITS = (
    "import json; from dataclasses import asdict; from engine.lab.worker import isolate; "
    "from engine import hardware; isolate(None, None); "
    "limits = hardware.measure_limits('cpu'); limits.memory_bandwidth_gbs = 31.5; "
    "hardware._cache_file('cpu').write_text(json.dumps(asdict(limits)))")


def run(args: list[str], cache, **env) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "LLM_SPEED_CACHE": str(cache), **env})


def test_tune_leaves_each_presets_plan_where_the_worker_reads_it(machine_setup_run, tmp_path):
    """The session's one `tune --preset tiny --preset draft` in a fresh cache (the fixture the
    served apps' caches are copied from), then a worker's build, tune again and the worker's
    `info` in a copy of what it left."""
    setup_cache, out = machine_setup_run
    shutil.copytree(setup_cache, tmp_path, dirs_exist_ok=True)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    limits = next((line for line in lines if line.startswith("limits ")), "")
    said = [line for line in lines if line != limits]
    kept = limits.startswith("limits measured: ")  # else disturbed: said why, not kept
    assert kept or "limits were disturbed by other work, so not kept" in out.stderr
    assert [line.split()[:3] for line in said] == [["tiny", "plan", "timed"],
                                                    ["draft", "plan", "timed"]]
    assert "thread(s) on core(s)" in out.stderr and "Traceback" not in out.stderr

    built = run(["-c", BUILD_AS_THE_WORKER, "tiny"], tmp_path)
    assert built.returncode == 0, built.stderr
    assert "weights made" in built.stdout
    assert " timed" not in built.stdout  # products and whole step: read from disk

    if not kept:  # the set-up's limits were disturbed: kept here as a quiet set-up keeps them
        planted = run(["-c", PLANT_LIMITS], tmp_path)
        assert planted.returncode == 0, planted.stderr
        limits = "limits measured: 31.5"
    again = run(["-m", "engine", "tune", "--preset", "draft"], tmp_path)
    assert again.returncode == 0 and again.stdout.splitlines()[-1].split() == [
        "draft", "plan", "already", "on", "disk"]
    # limits on disk: tune measures nothing, and the worker's `info` job reads them (no check)
    assert again.stdout.splitlines()[0] == "limits already on disk"
    info = run(["-c", INFO_AS_THE_WORKER], tmp_path)
    assert info.returncode == 0 and info.stdout.split() == ["None", limits.split()[2]]


def test_a_plan_on_disk_is_found_from_the_models_shapes_and_nothing_is_built(tmp_path,
                                                                             monkeypatch):
    """`tune` again: the plan a real build saved is found without making the model's weights
    (a second run built every preset's: 2.7 s on the 2-core machine)."""
    from engine.cli import tune
    from engine.steps import run_steps

    monkeypatch.setenv("LLM_SPEED_CACHE", str(tmp_path))
    assert not tune.plan_on_disk("draft")
    run_steps(tune.plan_steps("draft"))  # as the worker builds it: timed, saved
    assert tune.plan_on_disk("draft") and not tune.plan_on_disk("tiny")

    def no_build(*args, **kwargs):
        raise AssertionError("a model was built for a plan on disk")

    monkeypatch.setattr(tune, "plan_steps", no_build)
    assert tune.plan_preset("draft") is None


def test_a_worker_without_the_set_up_times_the_plan_itself(tmp_path):
    """The other side of the test above: without `tune` the build times it."""
    built = run(["-c", BUILD_AS_THE_WORKER, "draft"], tmp_path)
    assert built.returncode == 0, built.stderr
    assert "matrix products timed for 20 of 20 batch sizes" in built.stdout
    assert "decode steps timed for 20 of 20 batch sizes" in built.stdout


def test_unknown_preset_is_refused_in_one_line_before_any_timing(tmp_path):
    out = run(["-m", "engine", "tune", "--preset", "tiny", "--preset", "huge"], tmp_path)
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.strip().splitlines() == [
        "error: unknown preset 'huge': choose one of tiny, mini, small, large (or a draft model: "
        "draft; an experts model: moe-mini, moe-mini-dense, moe-tiny, moe-tiny-dense; a "
        "hybrid-attention model: tiny-hybrid)"]


def test_a_plan_that_cannot_be_saved_says_why_in_one_line(tmp_path):
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("")
    out = run(["-m", "engine", "tune", "--preset", "draft"], not_a_dir)
    assert out.returncode == 1 and "Traceback" not in out.stderr
    errors = [line for line in out.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 2 and errors[0].startswith("error: the machine's limits not measured: ")
    assert errors[1].startswith("error: draft's plan not timed: ")


def test_lesson_presets_cover_every_model_a_lesson_offers_or_warms():
    from lessons.registry import LESSONS, lesson_class

    offered = set()
    for lesson in LESSONS:
        page = lesson_class(lesson)
        if "preset" in page.param:
            offered.update(page.param.preset.objects)
        offered.update(params["preset"] for _, params in page.warm_jobs() if "preset" in params)
    assert offered and offered <= set(LESSON_PRESETS)
    assert "draft" in LESSON_PRESETS  # the speculative lesson's draft model
