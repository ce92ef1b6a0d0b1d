"""`bench-client` against our own server: the `run` JSON shape measured at the client, the
forced output lengths, and the client's view agreeing with the engine's own trace of the same
requests as causality demands (never earlier, one clock offset for all), plus bad arguments."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from run_checks import check_run_shape

from engine.cli.main import main
from engine.serve.bench_client import api_base
from engine.serve.bench_result import compare
from engine.serve.metrics import e2e_ms, ttft_ms
from engine.serve.trace import RequestTrace
from engine.serve.workload import WorkloadSpec, make_workload
from engine.tokenizer import Tokenizer

FLAGS = ["--rate", "30", "--requests", "12", "--prompt-len", "16:64", "--output-len", "8:24",
         "--seed", "3"]


def bench(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "engine", "bench-client", *args],
                          capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def result(server):
    out = bench("--base-url", server["url"], "--model", "tiny", *FLAGS, "--slo-ttft-ms", "500",
                "--json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_prints_the_run_shape_measured_at_the_client(result):
    check_run_shape(result)
    assert result["source"] == "client" and result["model"] == "tiny"
    assert result["device"] == "cpu" and result["policy"] == "continuous"
    assert result["metrics"]["failed"] == 0 and result["metrics"]["completed"] == 12
    assert result["metrics"]["goodput_rps"] is not None
    assert result["metrics"]["queue_ms"]["count"] == 0  # only the engine knows admission


def test_sends_the_same_workload_as_run(result):
    """Same flags and seed, same requests: arrival times, forced output lengths, prompts."""
    spec = WorkloadSpec(kind="poisson", requests=12, rate=30, prompt_len=(16, 64),
                        output_len=(8, 24), seed=3)
    assert result["workload"] == spec.to_json()
    requests = make_workload(spec, Tokenizer())
    for req, sent in zip(requests, result["requests"]):
        assert sent["output_len"] == req.output_len == len(sent["token_s"])  # one chunk a token
        assert sent["arrival_s"] >= req.arrival_s  # sent on time, never early
        # the prompt went as text; the server's count of it is within a token or two
        assert abs(sent["prompt_len"] - len(req.prompt_ids)) <= 2


def test_client_and_engine_agree_within_the_network_and_queueing(result):
    server = result["server"]
    assert server["requests_matched"] == 12
    clients = {r["name"]: r for r in result["requests"]}
    lo, hi = server["clock_offset_bounds_s"]
    assert lo <= hi, "no single clock offset fits every request: the traces disagree"
    for mine in server["requests"]:
        seen = clients[mine["name"]]
        # the client sent before the engine got it, and got every token after it was made
        sent_early = seen["arrival_s"] - mine["arrival_s"]
        for k, (c, s) in enumerate(zip(seen["token_s"], mine["token_s"], strict=True)):
            assert c - s >= sent_early, f"token {k} reached the client before it was made"
        assert ttft_ms(_t(seen)) >= ttft_ms(_t(mine))
        assert e2e_ms(_t(seen)) >= e2e_ms(_t(mine))
        assert seen["output_len"] == mine["output_len"]
    assert server["ttft_gap_ms"]["count"] == 12 and server["ttft_gap_ms"]["mean"] >= 0
    # the engine's steps on the client's clock: a step that decoded a request ended after the
    # client sent it and before the client got its last token (within the offset's error)
    steps, error = result["steps"], server["clock_offset_error_s"]
    by_engine_id = {mine["id"]: clients[mine["name"]] for mine in server["requests"]}
    checked = 0
    for step in steps:
        for i in step["decode_ids"]:
            seen = by_engine_id[i]
            assert seen["arrival_s"] - error <= step["end_s"] <= seen["finish_s"] + error
            checked += 1
    assert checked >= sum(r["output_len"] - 1 for r in result["requests"])
    assert max(s["decode_seqs"] for s in steps) >= 2


def _t(r: dict) -> RequestTrace:
    return RequestTrace(r.get("id", 0), r["arrival_s"], 0, r["output_len"],
                        first_token_s=r["first_token_s"], finish_s=r["finish_s"],
                        token_s=r["token_s"])


def test_closed_loop_keeps_concurrency_requests_outstanding(server):
    out = bench("--base-url", server["url"], "--model", "tiny", "--workload", "fixed",
                "--concurrency", "3", "--requests", "7", "--prompt-len", "8:16",
                "--output-len", "4:8", "--json")
    assert out.returncode == 0, out.stderr
    requests = json.loads(out.stdout)["requests"]
    assert all(r["error"] is None for r in requests)
    for r in requests:  # at each sending, at most 3 requests are out (itself included)
        out_now = [q for q in requests if q["arrival_s"] <= r["arrival_s"] < q["finish_s"]]
        assert len(out_now) <= 3


def test_compare_without_an_engine_trace_reports_nothing_matched():
    assert compare([], {"requests": [], "steps": []})["requests_matched"] == 0


@pytest.mark.parametrize("url,base", [("http://h:8000", "http://h:8000/v1"),
                                      ("http://h:8000/v1/", "http://h:8000/v1")])
def test_base_url_gets_its_v1(url, base):
    assert api_base(url) == base


@pytest.mark.parametrize("args,needle", [
    (["--base-url", "ftp://x", "--model", "tiny"], "base URL"),
    (["--base-url", "http://127.0.0.1:9/v1"], "--model"),
    (["--base-url", "http://127.0.0.1:9/v1", "--model", "tiny", "--rate", "0"], "rate"),
    (["--base-url", "http://127.0.0.1:9/v1", "--model", "tiny", "--prompt-len", "9:2"],
     "prompt length"),
    (["--base-url", "http://127.0.0.1:9/v1", "--model", "tiny", "--timeout", "-1"], "timeout"),
])
def test_bad_arguments_exit_2_with_one_line(capsys, args, needle):
    assert main(["bench-client", *args]) == 2
    out = capsys.readouterr()
    assert needle in out.err and len(out.err.strip().splitlines()) == 1
    assert "Traceback" not in out.err and out.out == ""


def test_what_the_server_refuses_is_named_before_anything_runs(capsys, server):
    def refused(*args: str) -> tuple[int, str]:
        code = main(["bench-client", "--requests", "2", *args])
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1, err
        return code, err[0]

    code, err = refused("--base-url", server["url"], "--model", "llama")
    assert code == 2 and "not served" in err and "tiny" in err
    code, err = refused("--base-url", server["url"], "--model", "tiny", "--prompt-len", "2000",
                        "--output-len", "100")
    assert code == 2 and "context of 2048" in err
    code, err = refused("--base-url", "http://127.0.0.1:9/v1", "--model", "tiny")
    assert code == 1 and "cannot reach" in err
