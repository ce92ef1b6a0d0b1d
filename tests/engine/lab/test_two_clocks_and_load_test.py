"""The two_clocks and load_test jobs (engine.lab.jobs.generation and .serving) run in this
process, on the trained tiny model, with small workloads: what they stream, what they return,
and the errors they refuse with."""

from __future__ import annotations

import pytest

from engine.errors import ConfigError
from engine.lab import registry, worker
from engine.lab.jobs.serving import mixed_workload
from engine.lab.results import parse_result
from engine.lab.worker import plain


def run(kind: str, params: dict, cancel_after: int | None = None):
    events: list[tuple[str, dict]] = []

    def emit(type_: str, data: dict) -> None:
        if "building" not in data:  # the body's own events, not its engine's build
            events.append((type_, data))

    def cancelled() -> bool:
        return cancel_after is not None and len(events) >= cancel_after

    result = worker.run(kind, params, emit, cancelled)
    if result is not None:  # its record reads it and gives it back unchanged
        assert parse_result(kind, plain(result)).to_dict() == plain(result)
    return result, events


def test_jobs_are_registered_with_their_defaults():
    assert not registry.get_spec("two_clocks").cacheable  # the reader's own text
    assert registry.get_spec("load_test").cacheable
    with pytest.raises(ValueError, match="unknown parameter"):
        registry.normalize("two_clocks", {"promt": "typo"})


def test_two_clocks_streams_only_the_readers_tokens_beside_the_background():
    result, events = run("two_clocks", {"prompt": "A list is", "max_new_tokens": 6,
                                        "background": 3, "arrive_after_ms": 50.0,
                                        "context_tokens": 16})
    tokens = [d for t, d in events if t == "token"]
    assert [d["index"] for d in tokens] == list(range(6))
    assert [d["kind"] for t, d in events if t == "request"] == ["arrived", "admitted", "finished"]
    assert len(result["tokens"]) == 6 and result["background"] == 3
    assert result["prompt_tokens"] == result["text_tokens"] + result["context_tokens"]
    assert result["context_tokens"] == 16
    m = result["metrics"]
    assert m["ttft_ms"] == pytest.approx(m["queue_ms"] + m["prefill_ms"])
    assert result["first_token_ms"] == pytest.approx(m["ttft_ms"])
    assert m["e2e_ms"] == pytest.approx(m["ttft_ms"] + 5 * m["tpot_ms"])
    assert m["itl_ms"]["count"] == 5 and m["output_tokens"] == 6
    # the background requests shared the reader's decode steps
    assert result["sequences_per_step"] == pytest.approx(4.0)
    assert [t["t_ms"] for t in result["tokens"]] == pytest.approx([d["t_ms"] for d in tokens])
    assert result["text"] == "".join(t["text"] for t in result["tokens"])


def test_two_clocks_without_streaming_sends_no_token_events():
    result, events = run("two_clocks", {"prompt": "The file", "max_new_tokens": 4,
                                        "stream": False})
    assert not [t for t, _ in events if t == "token"]
    assert len(result["tokens"]) == 4 and result["stream"] is False
    assert result["sequences_per_step"] == pytest.approx(1.0)


@pytest.mark.parametrize("params, words", [
    ({"prompt": "  "}, "prompt is empty"),
    ({"prompt": "x", "background": 99}, "background must be between"),
    ({"prompt": "x", "context_tokens": 5000}, "context_tokens must be between"),
    ({"prompt": "x", "stream": "yes"}, "stream must be true or false"),
])
def test_two_clocks_refuses_bad_params_with_one_line(params, words):
    with pytest.raises(ConfigError, match=words):
        run("two_clocks", params)


def test_load_test_mixes_short_and_long_requests_and_reports_progress():
    params = {"rate": 40.0, "requests": 12, "long_share": 0.5, "short_prompt": [8, 16],
              "short_output": [2, 4], "long_prompt": [64, 96], "long_output": [12, 16],
              "max_batch": 4, "seed": 3}
    result, events = run("load_test", params)
    sizes = [r["size"] for r in result["requests"]]
    assert set(sizes) == {"short", "long"} and len(sizes) == 12
    for r in result["requests"]:
        low, high = (12, 16) if r["size"] == "long" else (2, 4)
        assert low <= len(r["token_s"]) <= high
    progress = [d["done"] for t, d in events if t == "progress"]
    assert progress == list(range(13)) and result["metrics"]["completed"] == 12
    # the figure so far, for a page while the test goes on: at the end, the result's own median
    so_far = [d["so_far"] for t, d in events if t == "progress" and "so_far" in d]
    assert [s["answered"] for s in so_far] == list(range(1, 13))
    assert so_far[-1]["e2e_p50_ms"] == pytest.approx(result["metrics"]["e2e_ms"]["p50"])
    assert result["workload"]["long_share"] == 0.5 and result["policy"] == "continuous"
    assert result["metrics"]["e2e_ms"]["p99"] >= result["metrics"]["e2e_ms"]["p50"]
    # the same seed gives the same requests
    from engine.tokenizer import Tokenizer

    shapes = ((8, 16), (2, 4)), ((64, 96), (12, 16))
    again, again_sizes = mixed_workload(Tokenizer(), 40.0, 12, 0.5, *shapes, seed=3)
    assert again_sizes == sizes
    assert [len(r.prompt_ids) for r in again] == [r["prompt_len"] for r in result["requests"]]


def test_load_test_closed_loop_keeps_the_users_requests_outstanding():
    params = {"users": 3, "requests": 9, "long_share": 0.3, "short_prompt": [8, 16],
              "short_output": [2, 4], "long_prompt": [32, 48], "long_output": [6, 8],
              "max_batch": 8, "seed": 3}
    result, _ = run("load_test", params)
    assert result["workload"]["kind"] == "closed-loop mix" and result["workload"]["users"] == 3
    reqs = result["requests"]
    assert sum(r["arrival_s"] == 0.0 for r in reqs) == 3 and result["metrics"]["completed"] == 9
    finishes = sorted(r["finish_s"] for r in reqs)
    for r in reqs:  # 3 outstanding at every moment: a later request arrives as one finishes
        outstanding = sum(1 for o in reqs if o["arrival_s"] <= r["arrival_s"] < o["finish_s"])
        assert outstanding <= 3
        if r["arrival_s"] > 0:
            assert min(abs(r["arrival_s"] - f) for f in finishes) < 0.05


def test_load_test_cancelled_returns_nothing():
    result, _ = run("load_test", {"rate": 1.0, "requests": 5}, cancel_after=1)
    assert result is None


def test_load_test_refuses_a_bad_range():
    with pytest.raises(ConfigError, match="long prompt range"):
        run("load_test", {"long_prompt": [500, 100]})
