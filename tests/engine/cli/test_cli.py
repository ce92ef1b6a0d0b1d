"""The command-line contract: JSON shapes, and bad input refused with status 2 and one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace

import pytest

from engine.cli.main import main
from engine.config import get_preset
from engine.hardware import HardwareLimits

PRESET_KEYS = {"name", "params", "layers", "hidden", "heads", "kv_heads", "head_dim",
               "intermediate", "vocab", "context", "dtype", "weights", "kv_bytes_per_token"}


def run_engine(*args: str, cache_dir=None) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    if cache_dir is not None:
        env["LLM_SPEED_CACHE"] = str(cache_dir)
    return subprocess.run([sys.executable, "-m", "engine", *args], capture_output=True,
                          text=True, env=env, timeout=300)


def test_info_json(tmp_path):
    out = run_engine("info", "--json", cache_dir=tmp_path)
    assert out.returncode == 0, out.stderr
    info = json.loads(out.stdout)
    assert {"device", "torch", "threads", "presets", "memory_bandwidth_gbs",
            "matmul_gflops"} <= info.keys()
    assert info["memory_bandwidth_gbs"] > 0 and info["matmul_gflops"] > 0
    by_name = {p["name"]: p for p in info["presets"]}
    assert set(by_name) >= {"tiny", "small", "large"}
    for p in info["presets"]:
        assert PRESET_KEYS <= p.keys()
        elem = 4 if p["dtype"] == "float32" else 2
        assert p["kv_bytes_per_token"] == 2 * p["layers"] * p["kv_heads"] * p["head_dim"] * elem
    assert by_name["tiny"]["weights"] == "trained" and by_name["small"]["weights"] == "random"
    assert 100e6 < by_name["small"]["params"] < 150e6
    assert 0.9e9 < by_name["large"]["params"] < 1.5e9
    assert by_name["tiny"]["context"] >= 2048
    assert info["check"] is not None  # a fresh cache: measured now, inside the check
    assert info["check"]["disturbed"] == ("not cached" in out.stderr)


LIMITS = HardwareLimits(device="cpu", memory_bandwidth_gbs=31.5, matmul_gflops=180.0,
                        matmul_dtype="float32", threads=2, measured_at="now",
                        cache_bandwidth_gbs=120.0, llc_bytes=2**25)


@pytest.mark.parametrize("disturbed", [False, True], ids=["quiet", "disturbed"])
def test_info_keeps_limits_measured_quietly_and_measures_disturbed_ones_again(
        disturbed, tmp_path, monkeypatch, capsys):
    """`info` twice in one cache, its measurement and check made deterministic: quiet limits
    are kept and the second call reads them (no check); disturbed ones are printed with the
    reason, not kept, and measured again."""
    from engine import hardware
    from engine.lab.jobs import machine

    monkeypatch.setenv("LLM_SPEED_CACHE", str(tmp_path))
    monkeypatch.setattr(machine, "configure_threads", lambda: None)
    monkeypatch.setattr(hardware, "measure_limits", lambda device: replace(LIMITS))
    check = {"disturbed": disturbed, "reasons": ["other work took 300 ms"] if disturbed else []}
    measured = []

    def checked(measure):
        measured.append(1)
        return measure(), dict(check)

    monkeypatch.setattr(machine, "measure_checked", checked)
    assert main(["info", "--json"]) == 0
    first = capsys.readouterr()
    assert json.loads(first.out)["check"] == check
    assert ("other work took 300 ms): not cached" in first.err) is disturbed
    assert main(["info", "--json"]) == 0
    again = json.loads(capsys.readouterr().out)
    assert again["memory_bandwidth_gbs"] == 31.5
    if disturbed:
        assert again["check"] == check and len(measured) == 2  # measured again
    else:
        assert again["check"] is None and len(measured) == 1  # read from disk


def test_generate_json():
    out = run_engine("generate", "--prompt", "The list", "--max-new-tokens", "6", "--json")
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert {"device", "preset", "prompt", "text", "tokens", "ttft_ms", "tpot_ms"} <= result.keys()
    assert result["prompt"] == "The list"
    assert 1 <= len(result["tokens"]) <= 6
    assert "".join(t["text"] for t in result["tokens"]) == result["text"]
    times = [t["t_s"] for t in result["tokens"]]
    assert times == sorted(times)
    assert result["ttft_ms"] == pytest.approx(1000 * times[0])


def test_generate_speculative_json():
    out = run_engine("generate", "--prompt", "The list", "--max-new-tokens", "12",
                     "--speculative", "ngram", "--spec-k", "3", "--json")
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    spec = result["speculative"]
    assert spec["method"] == "ngram" and spec["k"] == 3
    assert spec["tokens"] == spec["accepted"] + spec["rounds"] == len(result["tokens"]) - 1
    assert {"acceptance_rate", "alpha", "tokens_per_step", "expected_tokens_per_step"} <= \
        spec.keys()


def test_generate_streams_text_without_json():
    out = run_engine("generate", "--prompt", "The list", "--max-new-tokens", "5", "--stream")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() and "TTFT" in out.stderr


def test_sweep_json():
    out = run_engine("sweep", "--batch-sizes", "1,3", "--prompt-len", "8", "--new-tokens", "6",
                     "--json")
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["preset"] == "tiny"
    assert result["path"] in ("fast", "plain")  # the fast path needs the C++ kernels
    assert result["backend"] == "cpp" or result["path"] == "plain"
    points = result["points"]
    assert [p["batch_size"] for p in points] == [1, 3]
    bytes_per_token = get_preset("tiny").kv_bytes_per_token(4)
    for p in points:
        assert {"batch_size", "ttft_ms", "tpot_ms", "tokens_per_s", "kv_bytes"} <= p.keys()
        assert p["tokens_per_s"] == pytest.approx(p["batch_size"] * 1000 / p["tpot_ms"])
        blocks_each = -(-(8 + 6) // 16)  # the last decode step's token is never cached
        assert p["kv_bytes"] == p["batch_size"] * blocks_each * 16 * bytes_per_token


@pytest.mark.parametrize("args, needle", [
    (["sweep", "--batch-sizes", "0"], "at least 1"),
    (["sweep", "--batch-sizes", "-4"], "at least 1"),
    (["sweep", "--batch-sizes", "many"], "whole number"),
    (["sweep", "--batch-sizes", "100000"], "KV"),
    (["sweep", "--batch-sizes", "4", "--kv-budget-mib", "1"], "KV"),
    (["sweep", "--preset", "huge"], "unknown preset"),
    (["generate", "--prompt", "word " * 3000], "context"),
    (["generate", "--prompt", "hi", "--max-new-tokens", "0"], "at least 1"),
    (["generate", "--prompt", "hi", "--spec-k", "17"], "spec k"),
    (["generate", "--prompt", "hi", "--speculative", "ngram", "--temperature", "0.7"],
     "greedily"),
    (["info", "--bogus"], "unrecognized"),
    (["run", "--policy", "continuous", "--classes", "chat:speed=2"], "cannot read 'speed=2'"),
    (["run", "--policy", "static", "--workload", "mix", "--classes",
      "interactive;batch"], "need the continuous policy"),
    (["generate", "--prompt", "hi", "--kv-dtype", "fp4"], "--kv-dtype"),
    (["serve", "--port", "0", "--classes", "chat:speed=2"], "cannot read 'speed=2'"),
    (["serve", "--port", "0", "--classes", "chat", "--over-quota", "drop"], "--over-quota"),
])
def test_bad_input_exits_2_with_one_line(capsys, tiny_engine, args, needle):
    """The CLI's main in this process: a fresh interpreter per case (torch imported each time)
    would test nothing more. The shared tiny engine is built first, so tiny's matrix-product
    plan is in the tests' cache and the KV refusals (checked once the engine is built) time
    no plan."""
    assert main(args) == 2
    out = capsys.readouterr()
    lines = out.err.strip().splitlines()
    assert len(lines) == 1, out.err
    assert needle in lines[0] and "Traceback" not in out.err
    assert out.out == ""


def test_bad_input_is_the_processs_exit_status():
    """`python -m engine` exits with main's status: one refusal through a real interpreter."""
    out = run_engine("sweep", "--batch-sizes", "0")
    assert out.returncode == 2, (out.stdout, out.stderr)
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "at least 1" in lines[0], out.stderr
    assert out.stdout == ""
