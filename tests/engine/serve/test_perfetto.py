"""`--trace-out FILE` on run, serve and bench-client: Chrome trace-event JSON whose spans are the
run's own timeline, scaled to microseconds: a step's event spans the step, a request's track
shows it queued from arrival to admission, one prefill event per step that prefilled a chunk of
it (its tokens adding up to the prompt), then decode from first token to last."""

from __future__ import annotations

import json
import subprocess
import sys
import threading

import httpx
import openai
import pytest

from engine.serve.perfetto import REQUESTS_PID, STEPS_PID, chrome_trace, step_name

US = 1e6


def spans(trace: dict, pid: int, tid: int | None = None) -> list[dict]:
    return [e for e in trace["traceEvents"] if e["ph"] == "X" and e["pid"] == pid
            and (tid is None or e["tid"] == tid)]


def ends(event: dict) -> tuple[float, float]:
    return event["ts"] / US, (event["ts"] + event["dur"]) / US


def check_against_timeline(trace: dict, run: dict, track_of: dict[int, int] | None = None,
                           client: bool = False) -> None:
    """The trace's spans are the run's records (see the module docstring)."""
    json.dumps(trace, allow_nan=False)
    steps = spans(trace, STEPS_PID)
    assert len(steps) == len(run["steps"])
    for event, step in zip(steps, run["steps"]):
        assert ends(event) == pytest.approx((step["start_s"], step["end_s"]), abs=1e-9)
        assert event["name"] == step_name(step)
        assert event["args"]["decode_ids"] == step["decode_ids"]
    track_of = track_of or {r["id"]: r["id"] for r in run["requests"]}
    engine_of = {v: k for k, v in track_of.items()}
    names = {e["tid"]: e["args"]["name"] for e in trace["traceEvents"]
             if e["ph"] == "M" and e["pid"] == REQUESTS_PID and e["name"] == "thread_name"}
    for r in run["requests"]:
        tid = r["id"] + 1
        assert names[tid] == f"request {r['id']}"
        mine = spans(trace, REQUESTS_PID, tid)
        by_name: dict[str, list[dict]] = {}
        for e in mine:
            by_name.setdefault(e["name"], []).append(e)
        if client:
            [wait] = by_name["waiting"]
            assert ends(wait) == pytest.approx((r["arrival_s"], r["first_token_s"]), abs=1e-9)
        else:
            [queued] = by_name["queued"]
            assert ends(queued) == pytest.approx((r["arrival_s"], r["admitted_s"]), abs=1e-9)
        [decode] = by_name["decode"]
        assert ends(decode) == pytest.approx((r["first_token_s"], r["finish_s"]), abs=1e-9)
        assert decode["args"]["tokens"] == len(r["token_s"])
        engine_id = engine_of.get(r["id"])
        chunks = [(s, n) for s in run["steps"] for i, n in s["prefill_chunks"] if i == engine_id]
        prefill = by_name.get("prefill", [])
        assert len(prefill) == len(chunks)
        for e, (s, n) in zip(prefill, chunks):
            assert ends(e) == pytest.approx((s["start_s"], s["end_s"]), abs=1e-9)
            assert e["args"]["tokens"] == n
        if not client and not r["preemptions"]:
            assert sum(n for _, n in chunks) == r["prompt_len"]
            # in order on the track: queued, the chunks, then decode from the last chunk's end
            assert ends(prefill[0])[0] == pytest.approx(r["admitted_s"], abs=1e-9)
            assert ends(prefill[-1])[1] == pytest.approx(r["first_token_s"], abs=1e-9)


def test_run_writes_its_timeline(tmp_path):
    path = tmp_path / "run.json"
    out = subprocess.run(
        [sys.executable, "-m", "engine", "run", "--policy", "continuous", "--requests", "5",
         "--rate", "inf", "--prompt-len", "40:90", "--output-len", "3:6", "--chunk-size", "32",
         "--max-batch", "4", "--kv-budget-mib", "8", "--trace-out", str(path), "--json"],
        capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    run = json.loads(out.stdout)
    trace = json.loads(path.read_text())
    check_against_timeline(trace, run)
    # chunked: some prompt took more than one step to prefill, and one request had to queue
    assert any(len([c for s in run["steps"] for c in s["prefill_chunks"] if c[0] == r["id"]]) > 1
               for r in run["requests"])
    assert max(r["admitted_s"] - r["arrival_s"] for r in run["requests"]) > 0


def test_bench_client_draws_the_engines_chunks_on_the_clients_tracks(server, tmp_path):
    path = tmp_path / "client.json"
    out = subprocess.run(
        [sys.executable, "-m", "engine", "bench-client", "--base-url", server["url"],
         "--model", "tiny", "--rate", "20", "--requests", "5", "--prompt-len", "8:40",
         "--output-len", "3:8", "--trace-out", str(path), "--json"],
        capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    trace = json.loads(path.read_text())
    by_name = {r["name"]: r["id"] for r in result["requests"]}
    track_of = {r["id"]: by_name[r["name"]] for r in result["server"]["requests"]}
    assert len(track_of) == 5
    check_against_timeline(trace, result, track_of, client=True)
    assert len(spans(trace, REQUESTS_PID)) >= 3 * 5 - 5  # waiting, decode, and chunks


def test_serve_writes_the_engines_timeline_when_it_stops(tmp_path):
    path = tmp_path / "serve.json"
    proc = subprocess.Popen(
        ["timeout", "600", sys.executable, "-m", "engine", "serve", "--port", "0", "--json",
         "--kv-budget-mib", "8", "--max-batch", "4", "--trace-out", str(path)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line: list[str] = []
        reader = threading.Thread(target=lambda: line.append(proc.stdout.readline()),
                                  daemon=True)
        reader.start()
        reader.join(120)
        assert line and line[0], "the server did not start"
        url = json.loads(line[0])["url"]
        client = openai.OpenAI(base_url=url, api_key="unused", timeout=60, max_retries=0)
        for k in range(3):
            client.completions.create(model="tiny", prompt=f"The list {k}", max_tokens=4,
                                      temperature=0, extra_body={"ignore_eos": True})
        engine = httpx.get(url + "/engine/trace", timeout=30).json()
    finally:
        proc.terminate()
        proc.wait(30)
    trace = json.loads(path.read_text())
    assert len(engine["requests"]) == 3
    check_against_timeline(trace, engine)


def test_a_request_never_sent_has_no_track():
    run = {"requests": [{"id": 0, "arrival_s": None, "prompt_len": 3, "token_s": []}],
           "steps": []}
    assert not spans(chrome_trace(run), REQUESTS_PID)
