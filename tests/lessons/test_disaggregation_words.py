"""Lesson 15's words: the transfer times its "On a GPU" box quotes are the formula's at the
figures it names, and its checkpoint's answers are the arithmetic they claim."""

from __future__ import annotations

from engine.calc.disaggregation import kv_bytes, transfer_ms
from lessons.words import disaggregation as words

LLAMA3_8B_KV_PER_TOKEN = 32 * 8 * 128 * 2 * 2  # layers, KV heads, head dim, K and V, bf16


def test_the_gpu_box_quotes_the_formulas_transfer_times():
    assert LLAMA3_8B_KV_PER_TOKEN == 131_072 and "131,072 bytes" in words.GPU_TEXT
    assert round(kv_bytes(2000, LLAMA3_8B_KV_PER_TOKEN) / 1e6) == 262
    assert "262 MB" in words.GPU_TEXT
    assert f"about {transfer_ms(2000, LLAMA3_8B_KV_PER_TOKEN, 900.0):.1f} ms" in words.GPU_TEXT
    assert f"about {transfer_ms(2000, LLAMA3_8B_KV_PER_TOKEN, 50.0):.1f} ms" in words.GPU_TEXT


def test_every_question_has_one_right_answer():
    for q in words.QUESTIONS:
        if hasattr(q, "choices"):
            assert sum(c.correct for c in q.choices) == 1, q.prompt
