"""Over-saturation (GuideLLM's slope test, with the achieved rate short of the offered one): the
test on made-up runs whose answer is known, and a sweep of rates against our own server that
stops at the first rate the engine cannot keep up with, saying so."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from engine.serve.saturation import judge, outstanding_at_sending, rising
from engine.serve.trace import RequestTrace


def test_a_clear_line_rises_and_noise_or_a_fall_does_not():
    rng = np.random.default_rng(0)
    x = np.linspace(0, 10, 40)
    assert rising(list(x), list(2 * x + rng.normal(0, 1, 40))).rising
    assert not rising(list(x), list(rng.normal(5, 1, 40))).rising or \
        rising(list(x), list(rng.normal(5, 1, 40))).margin_of_error < 2
    assert not rising(list(x), list(-x)).rising
    assert not rising([0, 1, 2, 3], [0, 1, 2, 3]).rising  # too few points to judge
    assert not rising([1.0] * 10, list(range(10))).rising  # all sent at once: no line


def run(gaps_s: float, service_s: float, n: int = 30) -> list[RequestTrace]:
    """n requests sent gaps_s apart to a server that answers one at a time in service_s."""
    out, free = [], 0.0
    for i in range(n):
        sent = i * gaps_s
        start = max(sent, free)
        free = start + service_s
        out.append(RequestTrace(i, sent, 8, 1, first_token_s=free, finish_s=free,
                                token_s=[free]))
    return out


def test_a_queue_that_grows_is_over_saturation_and_one_that_does_not_is_not():
    heavy = run(gaps_s=0.1, service_s=0.2)  # offered 10/s, served 5/s
    assert [c for _, c in outstanding_at_sending(heavy)][:4] == [1, 2, 2, 3]
    verdict = judge(heavy)
    assert verdict.over_saturated and verdict.ttft.slope == pytest.approx(1.0, rel=0.05)
    assert verdict.offered_rps == pytest.approx(10) and verdict.achieved_rps == pytest.approx(5)
    assert not judge(run(gaps_s=0.3, service_s=0.2)).over_saturated
    # latency that rises while completions keep up with sendings is not enough
    slowing = [RequestTrace(i, 0.1 * i, 8, 1, first_token_s=0.1 * i + 0.01 * i,
                            finish_s=0.1 * i + 0.5, token_s=[0.1 * i + 0.5])
               for i in range(30)]
    assert judge(slowing).ttft.rising and not judge(slowing).over_saturated


def test_a_sweep_stops_at_the_first_rate_the_engine_cannot_keep_up_with(server):
    out = subprocess.run(
        [sys.executable, "-m", "engine", "bench-client", "--base-url", server["url"],
         "--model", "tiny", "--rate", "1.5,400,800", "--burstiness", "50", "--requests", "12",
         "--prompt-len", "8:16", "--output-len", "8:12", "--repeat-interval-s", "0.3",
         "--json"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    sweep = json.loads(out.stdout)
    first = sweep["sweep"][0]
    assert [p["rate"] for p in sweep["sweep"]] == [1.5, 400], first["saturation"]
    assert sweep["over_saturated_at"] == 400 and sweep["not_run"] == [800]
    assert "over-saturated at 400" in sweep["message"]
    calm, flooded = (p["saturation"] for p in sweep["sweep"])
    assert not calm["over_saturated"] and flooded["over_saturated"]
    assert flooded["achieved_rps"] < 0.9 * flooded["offered_rps"]
    assert flooded["ttft"]["slope"] > 0 and flooded["concurrency"]["slope"] > 0
    assert sweep["sweep"][1]["metrics"]["ttft_ms"]["p50"] > sweep["sweep"][0]["metrics"][
        "ttft_ms"]["p50"]


def test_text_output_says_what_the_json_holds(server):
    out = subprocess.run(
        [sys.executable, "-m", "engine", "bench-client", "--base-url", server["url"],
         "--model", "tiny", "--rate", "50", "--requests", "4", "--prompt-len", "8",
         "--output-len", "4", "--slo-ttft-ms", "5000", "--slo-itl-ms", "5000",
         "--percentiles", "50,99", "--warmup-s", "0.001"],
        capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert "SLO attainment: TTFT <= 5000 ms 100%, ITL <= 5000 ms 100%" in text
    assert "percentiles (p50 p99)" in text and "warm-up: 1 requests" in text
