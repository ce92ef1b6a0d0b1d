"""Results a load-testing practitioner reads: attainment of each SLO beside goodput,
good-token throughput, chosen percentiles, repeats, and `--result-json` under the keys of
`vllm bench serve --save-result` (VLLM_SAVE_RESULT_KEYS, read from vLLM's
vllm/benchmarks/serve.py) with ours added, each figure recomputed here from the requests."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from engine.serve.report import SLOs, peaks, slo_report, vllm_result
from engine.serve.trace import RequestTrace

# What `vllm bench serve --save-result` writes without --save-detailed, with its default
# --percentile-metrics ttft,tpot,itl at --metric-percentiles 99 (e2el when it is selected).
VLLM_SAVE_RESULT_KEYS = {
    "date", "endpoint_type", "backend", "label", "model_id", "tokenizer_id", "num_prompts",
    "request_rate", "burstiness", "max_concurrency", "duration", "completed", "failed",
    "total_input_tokens", "total_output_tokens", "request_throughput", "request_goodput",
    "output_throughput", "total_token_throughput", "max_output_tokens_per_s",
    "max_concurrent_requests",
    "mean_ttft_ms", "median_ttft_ms", "std_ttft_ms", "p99_ttft_ms",
    "mean_tpot_ms", "median_tpot_ms", "std_tpot_ms", "p99_tpot_ms",
    "mean_itl_ms", "median_itl_ms", "std_itl_ms", "p99_itl_ms",
}
VLLM_E2EL_KEYS = {"mean_e2el_ms", "median_e2el_ms", "std_e2el_ms", "p99_e2el_ms"}


def trace(i: int, arrival: float, tokens: list[float], prompt: int = 10) -> RequestTrace:
    return RequestTrace(i, arrival, prompt, len(tokens), first_token_s=tokens[0],
                        finish_s=tokens[-1], token_s=tokens)


# TTFT 100, 300, 100 ms; largest gap 50, 50, 400 ms; E2E 200, 400, 600 ms
TRACES = [trace(0, 0.0, [0.1, 0.15, 0.2]), trace(1, 0.0, [0.3, 0.35, 0.4]),
          trace(2, 1.0, [1.1, 1.5, 1.6]),
          RequestTrace(3, 1.0, 10, 5)]  # failed: no token


def test_each_slo_is_judged_on_its_own_and_goodput_on_all():
    report = slo_report(TRACES, SLOs(ttft_ms=200, itl_ms=100, e2e_ms=500), duration_s=2.0)
    assert report["attainment"] == {"ttft": pytest.approx(2 / 3), "itl": pytest.approx(2 / 3),
                                    "e2e": pytest.approx(2 / 3)}
    assert report["requests_meeting_slo"] == 1  # only request 0 meets all three
    assert report["attainment_all"] == pytest.approx(1 / 3)
    assert report["goodput_rps"] == 0.5 and report["good_tokens"] == 3
    assert report["goodput_tok_s"] == 1.5
    # TPOT: (last - first) / (N - 1) = 50, 50, 250 ms
    assert slo_report(TRACES, SLOs(tpot_ms=100), 2.0)["attainment"]["tpot"] == \
        pytest.approx(2 / 3)
    assert slo_report(TRACES, SLOs(), 2.0) is None


def test_vllm_result_has_vllms_keys_and_definitions():
    out = vllm_result(TRACES, failed=1, duration_s=2.0, model="tiny", request_rate=4.0,
                      burstiness=1.0, max_concurrency=None, slos=SLOs(ttft_ms=200),
                      percentiles=(50, 99, 99.9))
    assert VLLM_SAVE_RESULT_KEYS | VLLM_E2EL_KEYS <= out.keys()
    assert {"p50_ttft_ms", "p99.9_ttft_ms", "slo", "goodput_tok_s"} <= out.keys()
    ttfts = [100.0, 300.0, 100.0]
    assert out["mean_ttft_ms"] == pytest.approx(np.mean(ttfts))
    assert out["median_ttft_ms"] == pytest.approx(100.0)
    assert out["std_ttft_ms"] == pytest.approx(np.std(ttfts))
    assert out["p99.9_ttft_ms"] == pytest.approx(np.percentile(ttfts, 99.9))
    assert out["num_prompts"] == 4 and out["completed"] == 3 and out["failed"] == 1
    assert out["total_input_tokens"] == 30 and out["total_output_tokens"] == 9
    assert out["output_throughput"] == 4.5 and out["total_token_throughput"] == 19.5
    assert out["request_goodput"] == 1.0  # requests 0 and 2 within 200 ms, over 2 s
    assert out["mean_itl_ms"] == pytest.approx(np.mean([50, 50, 50, 50, 400, 100]))


def test_peaks_count_tokens_and_active_requests_per_second_from_the_first_sending():
    tokens, active = peaks([t for t in TRACES if t.token_s])
    assert tokens == 6 and active == 2  # second 0: six tokens, two requests


@pytest.fixture(scope="module")
def repeated(server, tmp_path_factory):
    path = tmp_path_factory.mktemp("report") / "result.json"
    out = subprocess.run(
        [sys.executable, "-m", "engine", "bench-client", "--base-url", server["url"],
         "--model", "tiny", "--rate", "20", "--requests", "6", "--prompt-len", "8:24",
         "--output-len", "3:8", "--slo-ttft-ms", "150", "--slo-tpot-ms", "60",
         "--slo-itl-ms", "80", "--slo-e2e-ms", "500", "--percentiles", "50,90,99.9",
         "--repeats", "2", "--repeat-interval-s", "0.2", "--result-json", str(path), "--json"],
        capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    lines = path.read_text().splitlines()
    return json.loads(out.stdout), [json.loads(line) for line in lines]


def test_result_json_is_vllms_file_with_our_fields_added(repeated):
    result, files = repeated
    assert len(files) == 2  # one object a line, a repeat each
    last = files[-1]
    assert VLLM_SAVE_RESULT_KEYS <= last.keys()
    assert {"p50_ttft_ms", "p90_ttft_ms", "p99.9_ttft_ms", "p99.9_e2el_ms"} <= last.keys()
    requests = [r for r in result["requests"] if r["finish_s"] is not None]
    ttfts = [1000 * (r["first_token_s"] - r["arrival_s"]) for r in requests]
    assert last["completed"] == len(requests) == 6 and last["failed"] == 0
    assert last["mean_ttft_ms"] == pytest.approx(np.mean(ttfts))
    assert last["p90_ttft_ms"] == pytest.approx(np.percentile(ttfts, 90))
    assert last["total_output_tokens"] == sum(r["output_len"] for r in requests)
    assert last["duration"] == pytest.approx(result["metrics"]["duration_s"])
    assert last["output_throughput"] == pytest.approx(result["metrics"]["throughput_tok_s"])
    assert last["request_rate"] == 20.0 and last["max_concurrency"] is None
    assert last["model_id"] == "tiny" and last["slo"] == result["slo"]


def test_slo_attainment_is_recomputed_from_the_requests(repeated):
    result, _ = repeated
    slo, requests = result["slo"], result["requests"]
    limits = {"ttft": 150, "tpot": 60, "itl": 80, "e2e": 500}
    assert slo["limits_ms"] == limits
    met = []
    for r in requests:
        ttft = 1000 * (r["first_token_s"] - r["arrival_s"])
        gaps = np.diff(r["token_s"]) * 1000
        tpot = 1000 * (r["token_s"][-1] - r["token_s"][0]) / (r["output_len"] - 1)
        e2e = 1000 * (r["finish_s"] - r["arrival_s"])
        met.append({"ttft": ttft <= 150, "tpot": tpot <= 60, "itl": max(gaps) <= 80,
                    "e2e": e2e <= 500})
    for k in limits:
        assert slo["attainment"][k] == pytest.approx(sum(m[k] for m in met) / len(met))
    good = [r for r, m in zip(requests, met) if all(m.values())]
    assert slo["requests_meeting_slo"] == len(good)
    assert result["metrics"]["goodput_rps"] == pytest.approx(
        len(good) / result["metrics"]["duration_s"])
    assert slo["goodput_tok_s"] == pytest.approx(
        sum(r["output_len"] for r in good) / result["metrics"]["duration_s"])


def test_repeats_report_each_run_and_their_spread(repeated):
    result, files = repeated
    repeats = result["repeats"]
    assert repeats["count"] == 2 and len(repeats["runs"]) == 2
    assert repeats["runs"][-1]["ttft_p50_ms"] == result["metrics"]["ttft_ms"]["p50"]
    assert [run["completed"] for run in repeats["runs"]] == [f["completed"] for f in files]
    s = repeats["spread"]["ttft_p50_ms"]
    assert s["min"] <= s["mean"] <= s["max"]
    assert s["min"] == min(run["ttft_p50_ms"] for run in repeats["runs"])
    # the second run started at least the interval after the first ended
    assert files[0]["date"] <= files[1]["date"]


@pytest.mark.parametrize("args,needle", [
    (["--percentiles", "0,50"], "percentiles"),
    (["--percentiles", "x"], "percentiles"),
    (["--repeats", "0"], "repeats"),
    (["--slo-itl-ms", "0"], "ITL SLO"),
    (["--result-json", "/nonexistent-folder/r.json"], "folder"),
])
def test_bad_result_flags_exit_2_with_one_line(capsys, args, needle):
    from engine.cli.main import main

    code = main(["bench-client", "--base-url", "http://127.0.0.1:9/v1", "--model", "tiny",
                 *args])
    out = capsys.readouterr()
    lines = out.err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and needle in lines[0] and out.out == ""
