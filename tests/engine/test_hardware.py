"""The machine's limits: the last-level cache's size as Linux reports it, the cache roof kept
beside the memory and compute ones, and limits kept before the cache roof existed measured
again rather than read without it."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from engine import hardware
from engine.hardware import HardwareLimits, last_level_cache_bytes, parse_cache_size


def test_cache_sizes_parse_as_sys_writes_them():
    assert parse_cache_size("32768K\n") == 32 * 2**20
    assert parse_cache_size("2M") == 2 * 2**20
    assert parse_cache_size("512") == 512


def lscpu_llc() -> int | None:
    """The largest cache lscpu names, in bytes (its -B prints bytes), None without lscpu."""
    if shutil.which("lscpu") is None:
        return None
    out = subprocess.run(["lscpu", "-B", "-C=NAME,ONE-SIZE,TYPE"], capture_output=True,
                         text=True).stdout.split("\n")[1:]
    sizes = [int(line.split()[1]) for line in out
             if len(line.split()) >= 3 and line.split()[2] != "Instruction"
             and line.split()[1].isdigit()]
    return max(sizes) if sizes else None


def test_the_last_level_cache_is_the_largest_one_lscpu_names():
    llc, listed = last_level_cache_bytes("cpu"), lscpu_llc()
    if llc is None or listed is None:
        pytest.skip("this OS does not say how large its caches are")
    assert llc == listed


def test_limits_kept_without_the_cache_roof_are_measured_again(tmp_path, monkeypatch):
    monkeypatch.setattr(hardware, "_cache_file", lambda device: tmp_path / "limits.json")
    old = {"device": "cpu", "memory_bandwidth_gbs": 30.0, "matmul_gflops": 180.0,
           "matmul_dtype": "float32", "threads": 2, "measured_at": "then"}
    (tmp_path / "limits.json").write_text(json.dumps(old))
    assert not hardware.limits_on_disk("cpu")
    new = HardwareLimits(**old, cache_bandwidth_gbs=120.0, llc_bytes=2**25)
    monkeypatch.setattr(hardware, "measure_limits", lambda device: new)
    assert hardware.hardware_limits("cpu") == new  # measured, not read
    assert hardware.limits_on_disk("cpu")
    assert hardware.hardware_limits("cpu").cache_bandwidth_gbs == 120.0
