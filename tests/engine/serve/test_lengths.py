"""--lengths sharegpt: the bundled file names its source and holds lengths only; draws follow
its stated model (the published means, within its bounds); bench-client sends the drawn
lengths to our own server."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import numpy as np
import pytest

from engine.serve.lengths import LENGTHS_DIR, LengthModel, load_lengths
from engine.serve.workload import WorkloadSpec, make_workload


def test_the_bundle_names_its_source_and_holds_lengths_only():
    data = json.loads((LENGTHS_DIR / "sharegpt.json").read_text())
    assert set(data) == {"name", "what", "source", "how", "input", "output"}
    assert "arXiv:2309.06180" in data["source"] and "assumed" in data["how"]
    lengths = load_lengths("sharegpt")
    assert (lengths.input.mean, lengths.output.mean) == (161.31, 337.99)
    assert lengths.input.high + lengths.output.high <= 2048  # vLLM's ShareGPT filter


def test_draws_have_the_stated_mean_and_stay_in_bounds():
    rng = np.random.default_rng(0)
    wide = LengthModel(mean=161.31, sigma=1.0, low=1, high=10**9)
    draws = np.array(wide.draw(rng, 40000))
    assert draws.mean() == pytest.approx(161.31, rel=0.03)
    assert np.log(draws[draws > 20]).std() == pytest.approx(1.0, rel=0.15)
    bounded = load_lengths("sharegpt").output.draw(rng, 5000)
    assert min(bounded) >= 4 and max(bounded) <= 1024
    assert np.mean(bounded) < 337.99  # the tail beyond the bound is drawn again, lower


def test_a_seed_gives_the_same_lengths_and_the_ranges_are_not_used():
    spec = WorkloadSpec(requests=50, rate=5, lengths="sharegpt", prompt_len=(1, 1), seed=4)
    a, b = make_workload(spec), make_workload(spec)
    assert [len(r.prompt_ids) for r in a] == [len(r.prompt_ids) for r in b]
    assert len({len(r.prompt_ids) for r in a}) > 10
    assert spec.longest_prompt == 1024 and spec.to_json()["lengths"] == "sharegpt"
    assert "lengths" not in WorkloadSpec().to_json()


def test_an_unknown_name_is_refused_naming_the_ones_there_are(capsys):
    from engine.cli.main import main

    code = main(["bench-client", "--base-url", "http://127.0.0.1:9/v1", "--model", "tiny",
                 "--lengths", "alpaca"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "sharegpt" in err[0]


# A seed whose three draws are short (none over 100 new tokens): what is checked is that the
# drawn lengths are sent, which long answers would only make slower to see.
SEED = 36


def test_bench_client_sends_the_drawn_lengths(server):
    out = subprocess.run(
        [sys.executable, "-m", "engine", "bench-client", "--base-url", server["url"],
         "--model", "tiny", "--lengths", "sharegpt", "--rate", "inf", "--requests", "3",
         "--seed", str(SEED), "--json"], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    drawn = make_workload(WorkloadSpec(kind="poisson", requests=3, rate=math.inf,
                                       lengths="sharegpt", seed=SEED))
    assert max(r.output_len for r in drawn) <= 100
    assert [r["output_len"] for r in result["requests"]] == [r.output_len for r in drawn]
    for sent, req in zip(result["requests"], drawn):  # the server's count of the text
        assert abs(sent["prompt_len"] - len(req.prompt_ids)) <= 2
    assert result["workload"]["lengths"] == "sharegpt"
