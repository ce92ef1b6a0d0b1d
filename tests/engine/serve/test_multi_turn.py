"""--workload multi-turn against our own server: each conversation's turns go one after the
other, a think time apart, each turn's prompt the conversation so far (so it grows by the last
answer and the new message), and the turns' requests and metrics are reported as any others."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from engine.serve.conversation import SEPARATOR, Conversations, MultiTurnSpec
from engine.tokenizer import Tokenizer

THINK_S = 0.3


def test_a_turns_prompt_is_the_conversation_so_far():
    conv = Conversations(MultiTurnSpec(conversations=2, turns=3, think_time_s=0.5,
                                       prompt_len=(4, 8), output_len=(2, 3)), Tokenizer())
    assert [r.arrival_s is not None for r in conv.requests] == [True, False, False] * 2
    first = conv.prompts[0]
    nxt, text, delay = conv.follow_up(0, first, "ANSWER")
    assert (nxt, delay) == (1, 0.5)
    assert text == first + "ANSWER" + SEPARATOR + conv.messages[1]
    assert conv.follow_up(2, "x", "y") is None  # the last turn
    # the stand-in prompts are as long as each turn's prompt can get, for the context check
    assert len(conv.requests[2].prompt_ids) >= len(conv.requests[1].prompt_ids) + 2 + 4


@pytest.fixture(scope="module")
def chat(server):
    out = subprocess.run(
        [sys.executable, "-m", "engine", "bench-client", "--base-url", server["url"],
         "--model", "tiny", "--workload", "multi-turn", "--requests", "2", "--turns", "3",
         "--think-time-s", str(THINK_S), "--rate", "inf", "--prompt-len", "8:12",
         "--output-len", "3:5", "--json"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_turns_follow_each_other_a_think_time_apart(chat):
    requests = chat["requests"]
    assert len(requests) == 6 and all(r["error"] is None for r in requests)
    assert chat["workload"]["kind"] == "multi-turn" and chat["workload"]["turns"] == 3
    by_conv: dict[int, list[dict]] = {}
    for r in requests:
        by_conv.setdefault(r["conversation"], []).append(r)
    for turns in by_conv.values():
        turns.sort(key=lambda r: r["turn"])
        assert [r["turn"] for r in turns] == [0, 1, 2]
        for a, b in zip(turns, turns[1:]):
            assert b["scheduled_s"] == pytest.approx(a["finish_s"] + THINK_S, abs=0.05)
            assert b["arrival_s"] >= b["scheduled_s"] - 1e-6
            # the prompt grew by the answer and a new message of 8 to 12 tokens (the joins
            # re-tokenize within a few tokens)
            grown = b["prompt_len"] - a["prompt_len"] - a["output_len"]
            assert 8 - 4 <= grown <= 12 + 6


def test_every_turn_counts_in_the_metrics(chat):
    assert chat["metrics"]["completed"] == 6
    assert chat["metrics"]["output_tokens"] == sum(r["output_len"] for r in chat["requests"])
