"""`python -m engine invariance`: its JSON (the invariance job's record) on a small run in the
batch-invariant mode, and bad input refused with status 2 and one line."""

from __future__ import annotations

import json
import os

import pytest
from helpers import run_engine as run_with_cache

from engine.cli.main import main
from engine.lab.results import InvarianceResult


def run_engine(*args: str):
    """`python -m engine <args>` with the tests' own results cache."""
    return run_with_cache(list(args), os.environ["LLM_SPEED_CACHE"])


def test_invariance_json_in_the_batch_invariant_mode():
    out = run_engine("invariance", "--batch-sizes", "1,3", "--seeds", "1", "--prompt-len", "6",
                     "--new-tokens", "2", "--chunked-prefill", "--chunk-size", "4",
                     "--batch-invariant", "--kv-budget-mib", "16", "--json")
    assert out.returncode == 0, out.stderr
    result = InvarianceResult.from_dict(json.loads(out.stdout))
    assert result.batch_invariant and result.chunk == 4 and result.preset == "tiny"
    assert [p.batch for p in result.points] == [1, 3]
    assert all(p.max_ulp == 0 and p.texts_differ == 0 for p in result.points)


@pytest.mark.parametrize("args, needle", [
    (["--batch-sizes", "70"], "batch sizes run from 1"),
    (["--batch-sizes", "0"], "at least 1"),
    (["--seeds", "0"], "seeds"),
    (["--chunked-prefill", "--chunk-size", "0"], "chunk size"),
])
def test_bad_invariance_input_exits_2_with_one_line(capsys, args, needle):
    """The CLI's main in this process, as tests/engine/cli/test_cli.py runs the other refusals
    (its one real interpreter checks that main's status is the process's)."""
    assert main(["invariance", *args]) == 2
    out = capsys.readouterr()
    lines = out.err.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0] and "Traceback" not in out.err
    assert out.out == ""
