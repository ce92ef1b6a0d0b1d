"""GET /metrics on our own server: Prometheus' text format that prometheus_client's own parser
reads, under vLLM's metric names, whose counters and histogram counts move by exactly what the
requests sent (with the official openai client, and with bench-client) add."""

from __future__ import annotations

import json
import subprocess
import sys

import httpx
import openai
from prometheus_client.parser import text_string_to_metric_families
from server_calls import stats

from engine.serve.prometheus import one_two_five_buckets

VLLM_NAMES = {  # family name -> type, as vLLM's V1 engine exposes them
    "vllm:num_requests_running": "gauge",
    "vllm:num_requests_waiting": "gauge",
    "vllm:kv_cache_usage_perc": "gauge",
    "vllm:prompt_tokens": "counter",
    "vllm:generation_tokens": "counter",
    "vllm:num_preemptions": "counter",
    "vllm:request_success": "counter",
    "vllm:time_to_first_token_seconds": "histogram",
    "vllm:inter_token_latency_seconds": "histogram",
    "vllm:e2e_request_latency_seconds": "histogram",
    "vllm:request_queue_time_seconds": "histogram",
    "vllm:request_prompt_tokens": "histogram",
    "vllm:request_generation_tokens": "histogram",
    "vllm:iteration_tokens_total": "histogram",
}


def scrape(server) -> dict[str, float]:
    """Every sample of /metrics, keyed by name and labels other than model_name and engine."""
    root = server["url"].removesuffix("/v1")
    resp = httpx.get(root + "/metrics", timeout=30)
    assert resp.status_code == 200
    assert resp.headers["content-type"].startswith("text/plain")
    samples, types = {}, {}
    for family in text_string_to_metric_families(resp.text):
        types[family.name] = family.type
        for s in family.samples:
            assert s.labels["model_name"] == "tiny" and s.labels["engine"] == "0"
            rest = ",".join(f"{k}={v}" for k, v in sorted(s.labels.items())
                            if k not in ("model_name", "engine"))
            samples[s.name + (f"{{{rest}}}" if rest else "")] = s.value
    for name, kind in VLLM_NAMES.items():
        assert types.get(name) == kind, f"{name} is missing or not a {kind}"
    return samples


def delta(after: dict, before: dict, name: str) -> float:
    return after.get(name, 0.0) - before.get(name, 0.0)


def test_counters_move_by_what_the_requests_sent(server):
    before = scrape(server)
    client = openai.OpenAI(base_url=server["url"], api_key="unused", timeout=60, max_retries=0)
    prompts, outputs = 0, 0
    for k, stream in enumerate((False, True, False)):
        r = client.completions.create(model="tiny", prompt=f"The list {k} returns",
                                      max_tokens=5 + k, temperature=0, stream=stream,
                                      extra_body={"ignore_eos": True},
                                      **({"stream_options": {"include_usage": True}}
                                         if stream else {}))
        usage = r.usage if not stream else [c for c in r if c.usage][-1].usage
        prompts += usage.prompt_tokens
        outputs += usage.completion_tokens
        assert usage.completion_tokens == 5 + k
    bench = subprocess.run(
        [sys.executable, "-m", "engine", "bench-client", "--base-url", server["url"],
         "--model", "tiny", "--rate", "inf", "--requests", "4", "--prompt-len", "8:16",
         "--output-len", "3:6", "--json"], capture_output=True, text=True, timeout=300)
    assert bench.returncode == 0, bench.stderr
    sent = json.loads(bench.stdout)["requests"]
    prompts += sum(r["prompt_len"] for r in sent)
    outputs += sum(r["output_len"] for r in sent)
    after = scrape(server)

    n = 3 + len(sent)
    assert delta(after, before, "vllm:request_success_total{finished_reason=length}") == n
    assert delta(after, before, "vllm:prompt_tokens_total") == prompts
    assert delta(after, before, "vllm:generation_tokens_total") == outputs
    for hist in ("time_to_first_token_seconds", "e2e_request_latency_seconds",
                 "request_queue_time_seconds", "request_prompt_tokens",
                 "request_generation_tokens"):
        assert delta(after, before, f"vllm:{hist}_count") == n, hist
    assert delta(after, before, "vllm:request_prompt_tokens_sum") == prompts
    assert delta(after, before, "vllm:request_generation_tokens_sum") == outputs
    # one inter-token gap per token after each request's first
    assert delta(after, before, "vllm:inter_token_latency_seconds_count") == outputs - n
    # every token came out of some step, and each step's tokens were counted once
    assert delta(after, before, "vllm:iteration_tokens_total_sum") >= prompts + outputs - n
    # the histogram's buckets are cumulative and end with +Inf = count
    assert after["vllm:time_to_first_token_seconds_bucket{le=+Inf}"] == \
        after["vllm:time_to_first_token_seconds_count"]
    # idle now: nothing running, nothing waiting, no block held
    assert after["vllm:num_requests_running"] == after["vllm:num_requests_waiting"] == 0
    assert after["vllm:kv_cache_usage_perc"] == 0


def test_kv_usage_is_the_share_of_blocks_in_use_while_a_request_runs(server):
    """While a long streamed request decodes, the gauges show it running and its blocks: between
    the blocks it held just before the scrape and just after (it only gains blocks while it
    decodes, however fast or slow the machine lets it)."""
    client = openai.OpenAI(base_url=server["url"], api_key="unused", timeout=60, max_retries=0)
    stream = client.completions.create(model="tiny", prompt="The function returns",
                                       max_tokens=1000, temperature=0, stream=True,
                                       extra_body={"ignore_eos": True})
    try:
        next(iter(stream))  # admitted and decoding
        before = stats(server)
        now = scrape(server)
        after = stats(server)
    finally:
        stream.close()  # the server aborts it and frees its blocks
    assert now["vllm:num_requests_running"] == 1
    assert 0 < now["vllm:kv_cache_usage_perc"] <= 1
    share = 1 / after["kv_blocks_total"]
    assert before["kv_blocks_used"] * share - 1e-9 <= now["vllm:kv_cache_usage_perc"] \
        <= after["kv_blocks_used"] * share + 1e-9


def test_token_buckets_are_vllms_one_two_five():
    assert one_two_five_buckets(2048) == [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000]
    assert one_two_five_buckets(1) == [1]
