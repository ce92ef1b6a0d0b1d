"""--trace FILE: a Mooncake-format trace (tests/engine/serve/data/mooncake_sample.jsonl, a small
sample shipped for these tests) replayed with its arrival times and lengths, prompts that share
their leading hash ids sharing those blocks of tokens, and bench-client sending it to our own
server on time."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from engine.errors import ConfigError
from engine.serve.replay import load_trace, trace_requests
from engine.tokenizer import Tokenizer

SAMPLE = Path(__file__).parent / "data" / "mooncake_sample.jsonl"
BLOCK = 16


@pytest.fixture(scope="module")
def rows():
    return load_trace(SAMPLE)


def test_requests_keep_the_traces_times_and_lengths(rows):
    requests = trace_requests(rows, Tokenizer(), BLOCK, speed=2.0)
    raw = [json.loads(line) for line in SAMPLE.read_text().splitlines()]
    assert [r.arrival_s for r in requests] == [(d["timestamp"] - raw[0]["timestamp"]) / 2000
                                               for d in raw]
    assert [len(r.prompt_ids) for r in requests] == [d["input_length"] for d in raw]
    assert [r.output_len for r in requests] == [d["output_length"] for d in raw]


def test_shared_hash_ids_are_shared_prefixes(rows):
    requests = trace_requests(rows, Tokenizer(), BLOCK)
    for a, ra in zip(requests, rows):
        for b, rb in zip(requests, rows):
            common = 0
            while (common < min(len(ra.hash_ids), len(rb.hash_ids))
                   and ra.hash_ids[common] == rb.hash_ids[common]):
                common += 1
            shared = min(common * BLOCK, len(a.prompt_ids), len(b.prompt_ids))
            assert a.prompt_ids[:shared] == b.prompt_ids[:shared]
            if a.id != b.id and common < min(len(ra.hash_ids), len(rb.hash_ids)):
                # the first block they do not share differs
                k = common * BLOCK
                assert a.prompt_ids[k:k + BLOCK] != b.prompt_ids[k:k + BLOCK]


@pytest.mark.parametrize("line,needle", [
    ('{"timestamp": 0, "input_length": 5}', "line 2"),
    ('{"timestamp": 0, "input_length": 0, "output_length": 3}', "at least 1"),
    ("not json", "line 2"),
])
def test_a_bad_line_is_named(tmp_path, line, needle):
    path = tmp_path / "t.jsonl"
    path.write_text('{"timestamp": 0, "input_length": 5, "output_length": 2}\n' + line + "\n")
    with pytest.raises(ConfigError, match=needle):
        load_trace(path)


def test_bench_client_replays_the_trace_on_time(server, rows):
    out = subprocess.run(
        [sys.executable, "-m", "engine", "bench-client", "--base-url", server["url"],
         "--model", "tiny", "--trace", str(SAMPLE), "--trace-block-tokens", str(BLOCK),
         "--json"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["workload"]["kind"] == "trace" and result["workload"]["requests"] == len(rows)
    sent = result["requests"]
    t0 = rows[0].timestamp_ms
    assert [r["scheduled_s"] for r in sent] == [(row.timestamp_ms - t0) / 1000 for row in rows]
    for r, row in zip(sent, rows):
        assert r["error"] is None and r["arrival_s"] >= r["scheduled_s"]
        assert r["output_len"] == row.output_length
        assert abs(r["prompt_len"] - row.input_length) <= 2  # re-tokenized text


def test_a_missing_trace_file_exits_2_with_one_line(capsys, tmp_path):
    from engine.cli.main import main

    code = main(["bench-client", "--base-url", "http://127.0.0.1:9/v1", "--model", "tiny",
                 "--trace", str(tmp_path / "none.jsonl")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "cannot read the trace" in err[0]
