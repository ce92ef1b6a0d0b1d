"""`python -m engine tune`: the lessons' models' plans timed and the machine's limits measured at
set-up, where the lab's worker reads them, so no reader's first engine times one and no page's
`info` job measures the machine. It reads the session's one `tune` run, which the served apps'
caches are copied from (tests/conftest.py: machine_setup_run), so it runs in the pass they run
in (tests/suite_passes.py: SERIAL). A plan found on disk, bad input and failures in one line:
test_tune_plans.py."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

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


def test_a_worker_without_the_set_up_times_the_plan_itself(tmp_path):
    """The other side of the test above: without `tune` the build times it."""
    built = run(["-c", BUILD_AS_THE_WORKER, "draft"], tmp_path)
    assert built.returncode == 0, built.stderr
    assert "matrix products timed for 20 of 20 batch sizes" in built.stdout
    assert "decode steps timed for 20 of 20 batch sizes" in built.stdout
