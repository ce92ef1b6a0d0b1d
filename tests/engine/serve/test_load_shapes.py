"""Load shapes (--max-concurrency, --burstiness, --ramp-up-s, --warmup-s, --duration-s): the
arrival processes by their definitions, and bench-client against our own server honouring the
cap, the warm-up and the duration request by request."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import numpy as np
import pytest

from engine.cli.main import build_parser, main
from engine.cli.run import workload_from_args
from engine.serve.workload import WorkloadSpec, make_workload, ramp_up


def arrivals(**kw) -> list[float]:
    return [r.arrival_s for r in make_workload(WorkloadSpec(**kw))]


def test_ramp_up_is_the_same_draws_on_a_stretched_clock():
    flat = arrivals(kind="poisson", requests=400, rate=20, seed=1)
    ramped = arrivals(kind="poisson", requests=400, rate=20, seed=1, ramp_up_s=4.0)
    assert ramped == ramp_up(flat, 4.0)
    assert ramped == sorted(ramped) and ramped[0] == 0
    # expected arrivals by t: R t^2 / (2 S) in the ramp, R (t - S / 2) after it
    for u, t in zip(flat, ramped):
        expected = 20 * t * t / 8 if t < 4 else 20 * (t - 2)
        assert 20 * u == pytest.approx(expected)
    # the first second of the ramp sees about R / (2 S) = 2.5 arrivals, not 20
    assert sum(t < 1 for t in ramped) < 10 <= sum(t < 1 for t in flat)


def test_burstiness_other_than_one_makes_arrivals_gamma_as_vllms():
    parser = build_parser()
    args = parser.parse_args(["run", "--policy", "continuous", "--rate", "50",
                              "--burstiness", "0.25", "--requests", "2000"])
    spec = workload_from_args(args)
    assert spec.kind == "gamma" and spec.burstiness == 0.25
    gaps = np.diff(arrivals(kind=spec.kind, requests=2000, rate=50, burstiness=0.25))
    assert gaps.mean() == pytest.approx(1 / 50, rel=0.15)
    assert gaps.std() / gaps.mean() == pytest.approx(1 / math.sqrt(0.25), rel=0.15)
    args = parser.parse_args(["run", "--policy", "continuous"])
    assert workload_from_args(args).kind == "poisson"


@pytest.fixture(scope="module")
def shaped(server):
    """Poisson at 12/s for 1.2 s, at most 2 outstanding, the first 0.4 s warm-up."""
    out = subprocess.run(
        [sys.executable, "-m", "engine", "bench-client", "--base-url", server["url"],
         "--model", "tiny", "--rate", "12", "--duration-s", "1.2", "--warmup-s", "0.4",
         "--max-concurrency", "2", "--prompt-len", "8:16", "--output-len", "16:24",
         "--seed", "5", "--json"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_duration_stops_sending_and_requests_never_sent_are_left_out(shaped):
    spec = WorkloadSpec(kind="poisson", requests=shaped["workload"]["requests"], rate=12,
                        prompt_len=(8, 16), output_len=(16, 24), seed=5)
    due = [r.arrival_s for r in make_workload(spec) if r.arrival_s < 1.2]
    assert [r["scheduled_s"] for r in shaped["requests"]] == pytest.approx(due)
    assert len(due) < spec.requests  # more were drawn than the duration let out
    assert all(r["error"] is None and r["finish_s"] is not None for r in shaped["requests"])
    assert shaped["load"]["duration_s"] == 1.2


def test_max_concurrency_caps_what_is_outstanding_and_starts_the_clock_at_sending(shaped):
    requests = shaped["requests"]
    for r in requests:  # never sent before it was due; at its sending at most 2 out
        assert r["arrival_s"] >= r["scheduled_s"]
        out_now = [q for q in requests if q["arrival_s"] <= r["arrival_s"] < q["finish_s"]]
        assert len(out_now) <= 2
    # the cap made someone wait: a request due while two were out was sent only when one of
    # them had finished (the workload's arrivals at 0.473, 0.482 and 0.487 s, each asking 16 to
    # 24 tokens, make at least one such request on any machine this engine runs on)
    held_back = 0
    for r in requests:
        out_at_due = [q for q in requests if q is not r
                      and q["arrival_s"] <= r["scheduled_s"] < q["finish_s"]]
        if len(out_at_due) >= 2:
            held_back += 1
            assert r["arrival_s"] >= min(q["finish_s"] for q in out_at_due)
    assert held_back >= 1


def test_warmup_requests_are_listed_and_left_out_of_the_metrics(shaped):
    requests = shaped["requests"]
    warm = [r for r in requests if r["warmup"]]
    assert warm and len(warm) < len(requests)
    assert all((r["arrival_s"] < 0.4) == r["warmup"] for r in requests)
    assert shaped["load"]["warmup_requests"] == len(warm) and shaped["load"]["note"]
    measured = [r for r in requests if not r["warmup"]]
    metrics = shaped["metrics"]
    assert metrics["completed"] == len(measured)
    assert metrics["output_tokens"] == sum(r["output_len"] for r in measured)
    ttfts = [1000 * (r["first_token_s"] - r["arrival_s"]) for r in measured]
    assert metrics["ttft_ms"]["max"] == pytest.approx(max(ttfts))


@pytest.mark.parametrize("args,needle", [
    (["--warmup-s", "2", "--duration-s", "1"], "warm-up"),
    (["--duration-s", "0"], "duration"),
    (["--max-concurrency", "0"], "max concurrency"),
    (["--ramp-up-s", "2", "--rate", "inf"], "ramp-up"),
    (["--ramp-up-s", "2", "--workload", "fixed"], "ramp-up"),
    (["--ramp-up-s", "-1"], "ramp-up"),
])
def test_bad_load_flags_exit_2_with_one_line(capsys, args, needle):
    code = main(["bench-client", "--base-url", "http://127.0.0.1:9/v1", "--model", "tiny",
                 *args])
    out = capsys.readouterr()
    lines = out.err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and needle in lines[0] and out.out == ""
