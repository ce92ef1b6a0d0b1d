"""`serve --classes`: the HTTP server puts each request in a traffic class (the X-Traffic-Class
header, the body's traffic_class or service_tier) and its tenant's bucket (the `user` field);
a request over a class's cap gets 400 and one over its tenant's quota 429 (with Retry-After),
each an OpenAI-style error the official `openai` client raises as its own, before any token."""

from __future__ import annotations

import httpx
import openai
import pytest
from helpers import engine_server
from server_calls import engine_trace, stats

from engine.serve.api_server import refusal_error
from engine.traffic import Refusal, RefusalKind

# Interactive (the first class: a request naming none goes here) caps new tokens at 8 and gives
# each tenant a bucket of 20 tokens refilling at 0.1 a second; batch takes up to 32 new tokens.
CLASSES = ("interactive:priority=2,max_new=8,tenant_rate=0.1,tenant_burst=20;"
           "batch:priority=1,max_new=32")
PROMPT = [11, 12, 13]  # three prompt tokens: a request of 8 new tokens costs 11
START_S = 600  # a bound for a broken start on a loaded machine, not a timing claim


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    log = tmp_path_factory.mktemp("classes") / "stderr.txt"
    with engine_server(log, ["--kv-budget-mib", "16", "--max-batch", "4", "--classes", CLASSES],
                       START_S) as info:
        yield info


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server["url"], api_key="unused", timeout=60, max_retries=0)


def lane_of(server, response_id: str) -> dict:
    [row] = [r for r in engine_trace(server)["requests"] if r["name"] == response_id]
    return row


def test_the_server_says_its_classes(server):
    assert [c["name"] for c in server["traffic"]["classes"]] == ["interactive", "batch"]
    assert server["traffic"]["over_quota"] == "refuse"
    assert set(stats(server)["traffic"]) == {"interactive", "batch"}


def test_a_request_runs_in_the_class_it_names_or_the_first(client, server):
    plain = client.completions.create(model="tiny", prompt=PROMPT, max_tokens=4, user="ann")
    assert lane_of(server, plain.id)["traffic_class"] == "interactive"
    assert lane_of(server, plain.id)["tenant"] == "ann"
    tier = client.chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": "hello"}], max_tokens=20,
        service_tier="batch", user="ann")  # over interactive's cap of 8: batch's is 32
    assert tier.choices[0].finish_reason in ("stop", "length")
    assert lane_of(server, tier.id)["traffic_class"] == "batch"
    header = client.completions.create(model="tiny", prompt=PROMPT, max_tokens=20,
                                       extra_headers={"X-Traffic-Class": "batch"},
                                       extra_body={"traffic_class": "interactive"})
    assert lane_of(server, header.id)["traffic_class"] == "batch"  # the header wins


def test_a_capped_request_gets_400_naming_the_cap_streaming_or_not(client, server):
    with pytest.raises(openai.BadRequestError, match="caps new tokens at 8; this request "
                                                     "asked for 9"):
        client.completions.create(model="tiny", prompt=PROMPT, max_tokens=9, user="bob")
    with pytest.raises(openai.BadRequestError, match="no traffic class 'video'"):
        client.completions.create(model="tiny", prompt=PROMPT, max_tokens=4, stream=True,
                                  extra_body={"traffic_class": "video"})
    r = httpx.post(server["url"] + "/completions", timeout=30,
                   json={"model": "tiny", "prompt": PROMPT, "max_tokens": 9})
    assert r.status_code == 400
    assert r.json()["error"]["type"] == "BadRequestError"
    assert r.json()["error"]["param"] == "traffic_class"
    assert stats(server)["requests_refused"] >= 3


def test_a_tenant_over_its_quota_gets_429_with_retry_after_and_others_go_on(client, server):
    first = client.completions.create(model="tiny", prompt=PROMPT, max_tokens=8, user="flood")
    assert first.usage.completion_tokens >= 1  # 11 of flood's 20 tokens: 9 left
    r = httpx.post(server["url"] + "/completions", timeout=30,
                   json={"model": "tiny", "prompt": PROMPT, "max_tokens": 8, "user": "flood"})
    assert r.status_code == 429
    error = r.json()["error"]
    assert error["type"] == "RateLimitError" and error["code"] == 429
    assert "tenant 'flood' is over its quota in class 'interactive'" in error["message"]
    assert 1 <= int(r.headers["Retry-After"]) <= 20  # 2 tokens short at 0.1 a second, at most
    with pytest.raises(openai.RateLimitError, match="over its quota"):
        client.completions.create(model="tiny", prompt=PROMPT, max_tokens=8, user="flood",
                                  stream=True)
    other = client.completions.create(model="tiny", prompt=PROMPT, max_tokens=8, user="carol")
    assert other.usage.completion_tokens >= 1


def test_a_full_queue_is_429_and_a_cap_400():
    full = refusal_error(Refusal("refused: class 'batch''s queue is full (1 waiting)",
                                 RefusalKind.QUEUE_FULL))
    assert (full.status, full.kind, full.headers) == (429, "RateLimitError", None)
    cap = refusal_error(Refusal("refused: class 'x' caps new tokens at 8; this request asked "
                                "for 9", RefusalKind.CAP))
    assert (cap.status, cap.kind, cap.param) == (400, "BadRequestError", "traffic_class")
