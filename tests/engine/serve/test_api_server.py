"""The OpenAI-compatible server, driven by the official `openai` client (and raw HTTP where the
client cannot send what is tested): outputs equal the engine's own greedy output, usage counts,
streaming, concurrent clients batched together, bad requests refused with an error object, and a
client that goes away freeing its sequence and KV blocks at once."""

from __future__ import annotations

import concurrent.futures
import json
import time

import httpx
import openai
import pytest
from helpers import SERVER_MAX_BATCH as MAX_BATCH
from run_checks import assert_same_greedy_output
from server_calls import engine_trace, stats

from engine.generate import generate
from engine.serve.protocol import ChatMessage, chat_text
from engine.serve.workload import Request

PROMPT = "The function returns"


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server["url"], api_key="unused", timeout=60, max_retries=0)


def greedy(engine, prompt_ids: list[int], max_tokens: int, ignore_eos: bool = False) -> list[int]:
    """The engine's own greedy output, run here without the server."""
    [gen] = generate(engine, [prompt_ids], max_tokens, ignore_eos=ignore_eos)
    return gen.seq.output_ids


def same_output(engine, prompt_ids, expected: list[int], got: list[int], label: str):
    req = Request(0, prompt_ids, len(expected))
    assert_same_greedy_output(engine, [req], {0: expected}, {0: got}, label)


def wait_until(condition, timeout_s: float = 30.0, what: str = "condition"):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"{what} did not happen within {timeout_s} s")


def idle(server) -> dict:
    return wait_until(lambda: (s := stats(server))["running"] == 0 and s["waiting"] == 0
                      and s["kv_blocks_used"] == 0 and s, what="engine idle with no blocks used")


def test_models_names_the_preset_and_its_context(client, server):
    [card] = client.models.list().data
    assert card.id == server["model"] == "tiny"
    assert card.model_extra["max_model_len"] == 2048


def test_completion_equals_the_engines_greedy_output(client, engine, server):
    ids = engine.tokenizer.encode(PROMPT)
    expected = greedy(engine, ids, 24)
    r = client.completions.create(model="tiny", prompt=PROMPT, max_tokens=24, temperature=0,
                                  extra_body={"return_token_ids": True})
    choice = r.choices[0]
    same_output(engine, ids, expected, choice.model_extra["token_ids"], "non-streamed")
    assert choice.text == engine.tokenizer.decode(choice.model_extra["token_ids"])
    assert r.usage.prompt_tokens == len(ids)
    assert r.usage.completion_tokens == len(choice.model_extra["token_ids"])
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens
    assert choice.finish_reason == ("length" if r.usage.completion_tokens == 24 else "stop")
    assert r.id.startswith("cmpl-") and r.object == "text_completion"
    # The server's trace has the request's HTTP side: it reached the server, was tokenized,
    # handed in, and its response built after its text was ready (engine.serve.phases).
    [mine] = [t for t in engine_trace(server)["requests"] if t["name"] == r.id]
    assert mine["received_s"] <= mine["tokenize_start_s"] < mine["tokenize_end_s"] \
        <= mine["arrival_s"]
    assert mine["response_end_s"] >= mine["response_s"] >= mine["finish_s"]
    p = mine["phases"]
    assert p["tokenize_s"] > 0 and p["http_in_s"] >= 0 and p["http_out_s"] >= 0
    assert p["e2e_s"] == pytest.approx(mine["response_end_s"] - mine["received_s"])
    # that the phases cover its time, a wall-clock bound: test_phases.py


def test_streamed_completion_sends_one_event_per_token_then_usage_then_done(client, server,
                                                                            engine):
    ids = engine.tokenizer.encode(PROMPT)
    expected = greedy(engine, ids, 20)
    chunks = list(client.completions.create(
        model="tiny", prompt=ids, max_tokens=20, temperature=0, stream=True,
        stream_options={"include_usage": True}, extra_body={"return_token_ids": True}))
    tokens, usage = chunks[:-1], chunks[-1]
    assert all(len(c.choices) == 1 and len(c.choices[0].model_extra["token_ids"]) == 1
               for c in tokens)
    got = [c.choices[0].model_extra["token_ids"][0] for c in tokens]
    same_output(engine, ids, expected, got, "streamed")
    assert "".join(c.choices[0].text for c in tokens) == engine.tokenizer.decode(got)
    assert [c.choices[0].finish_reason for c in tokens[:-1]] == [None] * (len(tokens) - 1)
    assert tokens[-1].choices[0].finish_reason in ("length", "stop")
    assert usage.choices == [] and usage.usage.completion_tokens == len(got)
    assert usage.usage.prompt_tokens == len(ids)
    # on the wire: server-sent events, the last one [DONE]
    with httpx.stream("POST", server["url"] + "/completions", timeout=60, json={
            "model": "tiny", "prompt": PROMPT, "max_tokens": 3, "temperature": 0,
            "stream": True}) as resp:
        assert resp.headers["content-type"].startswith("text/event-stream")
        events = [line for line in resp.iter_lines() if line]
    assert all(e.startswith("data: ") for e in events) and events[-1] == "data: [DONE]"
    # greedy, so the same tokens as above: one event per token (3, fewer only if greedy stops)
    assert len(events) == min(3, len(got)) + 1


def test_chat_completion_uses_the_template_and_streams_the_same_text(client, engine):
    messages = [{"role": "system", "content": "You explain Python."},
                {"role": "user", "content": "What does a list hold?"}]
    ids = engine.tokenizer.encode(chat_text([ChatMessage(**m) for m in messages]))
    expected = greedy(engine, ids, 16)
    r = client.chat.completions.create(model="tiny", messages=messages, max_tokens=16,
                                       temperature=0, extra_body={"return_token_ids": True})
    got = r.choices[0].model_extra["token_ids"]
    same_output(engine, ids, expected, got, "chat")
    assert r.choices[0].message.role == "assistant"
    assert r.choices[0].message.content == engine.tokenizer.decode(got)
    assert r.usage.prompt_tokens == len(ids) and r.usage.completion_tokens == len(got)
    stream = client.chat.completions.create(model="tiny", messages=messages, max_tokens=16,
                                            temperature=0, stream=True)
    deltas = [c.choices[0].delta for c in stream]
    assert deltas[0].role == "assistant"
    assert "".join(d.content or "" for d in deltas) == r.choices[0].message.content


def test_stop_string_cuts_the_text_and_ends_the_request(client, engine):
    ids = engine.tokenizer.encode(PROMPT)
    text = engine.tokenizer.decode(greedy(engine, ids, 24))
    stop = text[6:10]
    assert stop.strip(), text
    cut = text[:text.find(stop)]
    r = client.completions.create(model="tiny", prompt=PROMPT, max_tokens=24, temperature=0,
                                  stop=[stop, "never appears"])
    assert r.choices[0].text == cut and r.choices[0].finish_reason == "stop"
    assert r.usage.completion_tokens < 24
    streamed = client.completions.create(model="tiny", prompt=PROMPT, max_tokens=24,
                                         temperature=0, stop=stop, stream=True)
    pieces = [c.choices[0] for c in streamed]
    assert "".join(p.text for p in pieces) == cut and pieces[-1].finish_reason == "stop"


def test_seeded_sampling_repeats_and_respects_top_p(client):
    def sample(**kw):
        return client.completions.create(model="tiny", prompt=PROMPT, max_tokens=12,
                                         temperature=1.0, **kw).choices[0].text

    assert sample(seed=7) == sample(seed=7)
    nucleus = {sample(seed=s, top_p=1e-6) for s in range(3)}  # only the top token survives
    greedy_text = client.completions.create(model="tiny", prompt=PROMPT, max_tokens=12,
                                            temperature=0).choices[0].text
    assert nucleus == {greedy_text}


def test_sixteen_concurrent_streams_are_batched_and_all_finish(client, server, engine):
    prompts = [f"{PROMPT} {word}" for word in
               "a list a tuple the value an error the name a file the key the module".split()]
    prompts = (prompts * 2)[:16]
    since = stats(server)["now_s"]

    def one(prompt: str) -> tuple[str, list[int], int]:
        chunks = list(client.completions.create(
            model="tiny", prompt=prompt, max_tokens=24, temperature=0, stream=True,
            stream_options={"include_usage": True},
            extra_body={"return_token_ids": True, "ignore_eos": True}))
        got = [i for c in chunks[:-1] for i in c.choices[0].model_extra["token_ids"]]
        return chunks[0].id, got, chunks[-1].usage.completion_tokens

    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        results = list(pool.map(one, prompts))
    for prompt, (_, got, completion_tokens) in zip(prompts, results):
        ids = engine.tokenizer.encode(prompt)
        assert completion_tokens == len(got) == 24
        same_output(engine, ids, greedy(engine, ids, 24, ignore_eos=True), got, prompt)
    trace = engine_trace(server, since)
    names = {name for name, _, _ in results}
    mine = [r for r in trace["requests"] if r["name"] in names]
    assert len(mine) == 16 and all(r["finish_s"] is not None for r in mine)
    decode = [s["decode_seqs"] for s in trace["steps"]]
    assert max(decode) >= 4, f"no step decoded several sequences: {decode}"
    assert max(s["running"] for s in trace["steps"]) <= MAX_BATCH
    # continuous batching: some request was admitted while others were decoding
    assert any(s["admitted_ids"] and s["decode_seqs"] for s in trace["steps"])
    idle(server)


def test_disconnect_mid_stream_frees_the_sequence_and_its_blocks(server):
    idle(server)
    since = stats(server)["now_s"]
    body = {"model": "tiny", "prompt": PROMPT, "max_tokens": 1800, "ignore_eos": True,
            "stream": True}
    with httpx.stream("POST", server["url"] + "/completions", json=body, timeout=60) as resp:
        lines = resp.iter_lines()
        events = [next(lines) for _ in range(8)]
        name = json.loads(next(e for e in events if e.startswith("data:"))[6:])["id"]
        during = stats(server)
    assert during["running"] == 1 and during["kv_blocks_used"] > 0
    after = idle(server)  # the client is gone: no sequence, no block left
    assert after["requests_aborted"] >= 1
    [record] = [r for r in engine_trace(server, since)["requests"] if r["name"] == name]
    assert record["finish_reason"] == "abort" and record["finish_s"] is None
    assert len(record["token_s"]) < 1800


def test_disconnect_while_waiting_for_a_whole_answer_frees_it_too(server):
    idle(server)
    before = stats(server)["requests_aborted"]
    body = {"model": "tiny", "prompt": PROMPT, "max_tokens": 1800, "ignore_eos": True}
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(server["url"] + "/completions", json=body, timeout=1.0)
    after = idle(server)
    assert after["requests_aborted"] == before + 1


BAD = [
    # (what, body or raw bytes, status, param or None)
    ("unknown model", {"model": "gpt-4", "prompt": "x"}, 404, "model"),
    ("prompt longer than the context", {"model": "tiny", "prompt": list(range(1, 2049))},
     400, "input_tokens"),
    ("max_tokens below 1", {"model": "tiny", "prompt": "x", "max_tokens": 0}, 400, "max_tokens"),
    ("max_tokens past the context", {"model": "tiny", "prompt": "x", "max_tokens": 2048}, 400,
     "max_tokens"),
    ("malformed JSON", b'{"model": "tiny", "prompt": ', 400, None),
    ("max_tokens of the wrong type", {"model": "tiny", "prompt": "x", "max_tokens": "ten"}, 400,
     "max_tokens"),
    ("prompt of the wrong type", {"model": "tiny", "prompt": 42}, 400, "prompt"),
    ("temperature of the wrong type", {"model": "tiny", "prompt": "x", "temperature": "hot"},
     400, "temperature"),
    ("no model", {"prompt": "x"}, 400, "model"),
    ("empty prompt", {"model": "tiny", "prompt": ""}, 400, "prompt"),
    ("token outside the vocabulary", {"model": "tiny", "prompt": [1, 99999]}, 400, "prompt"),
    ("negative temperature", {"model": "tiny", "prompt": "x", "temperature": -1}, 400,
     "temperature"),
    ("top_p zero", {"model": "tiny", "prompt": "x", "top_p": 0}, 400, "top_p"),
    ("several choices", {"model": "tiny", "prompt": "x", "n": 2}, 400, "n"),
    ("stream options without stream",
     {"model": "tiny", "prompt": "x", "stream_options": {"include_usage": True}}, 400,
     "stream_options"),
    ("a body that is not an object", b"[1, 2]", 400, None),
]
BAD_CHAT = [
    ("no messages", {"model": "tiny", "messages": []}, 400, "messages"),
    ("unknown role", {"model": "tiny", "messages": [{"role": "robot", "content": "hi"}]}, 400,
     "messages"),
    ("messages of the wrong type", {"model": "tiny", "messages": "hi"}, 400, "messages"),
]


@pytest.mark.parametrize("path,case", [("/completions", c) for c in BAD] +
                         [("/chat/completions", c) for c in BAD_CHAT],
                         ids=[c[0] for c in BAD + BAD_CHAT])
def test_bad_requests_get_an_error_object_never_a_traceback(server, path, case):
    _, body, status, param = case
    url = server["url"] + path
    if isinstance(body, bytes):
        resp = httpx.post(url, content=body, headers={"content-type": "application/json"})
    else:
        resp = httpx.post(url, json=body)
    assert resp.status_code == status, resp.text
    assert "Traceback" not in resp.text
    error = resp.json()["error"]
    assert error["message"] and error["code"] == status
    assert error["type"] == ("NotFoundError" if status == 404 else "BadRequestError")
    if param is not None:
        assert error["param"] == param, error


def test_the_openai_client_raises_its_own_errors(client):
    with pytest.raises(openai.NotFoundError, match="does not exist"):
        client.completions.create(model="nope", prompt="x")
    with pytest.raises(openai.BadRequestError, match="maximum context length is 2048"):
        client.completions.create(model="tiny", prompt="x", max_tokens=5000)
