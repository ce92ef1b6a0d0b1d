"""The shipped tiny checkpoint and tokenizer: they load, match their training record, round-trip
text and stay small."""

from __future__ import annotations

import json

import pytest
import torch
from tokenizers import Tokenizer as HFTokenizer

from engine.config import TINY_CHECKPOINT, TOKENIZER_FILE, TRAINING_RECORD, get_preset
from engine.model.model import LlamaModel, load_checkpoint
from engine.tokenizer import EOS_TOKEN, Tokenizer
from engine.training.train import heldout_loss, heldout_tokens

MAX_SHIPPED_BYTES = 20 * 1024 * 1024


@pytest.fixture(scope="module")
def record() -> dict:
    return json.loads(TRAINING_RECORD.read_text())


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    return Tokenizer()


def test_checkpoint_reproduces_recorded_heldout_loss(record: dict) -> None:
    model = LlamaModel(get_preset("tiny"))
    load_checkpoint(model, TINY_CHECKPOINT)
    model.eval()
    assert model.embed.weight.dtype == torch.float32
    tokens = heldout_tokens(HFTokenizer.from_file(str(TOKENIZER_FILE)))
    assert len(tokens) == record["heldout_eval"]["heldout_tokens"]
    evaluation = record["heldout_eval"]
    loss = heldout_loss(model, tokens, evaluation["seq_len"], evaluation["max_windows"])
    assert loss == pytest.approx(record["heldout_loss"], rel=1e-3)
    assert loss < 6.0  # far below the ln(4096) = 8.3 of a model that learned nothing


def test_tokenizer_round_trips_text(tokenizer: Tokenizer) -> None:
    texts = [
        "The function returns a list of strings.",
        "  leading spaces,\ttabs\nand newlines\n\n",
        "Non-ASCII: caf\u00e9, \u2014 dash, \u6f22\u5b57, emoji \U0001f600.",
        "def f(x):\n    return x ** 2  # code",
    ]
    for text in texts:
        assert tokenizer.decode(tokenizer.encode(text)) == text


def test_tokenizer_has_end_of_text_token(tokenizer: Tokenizer) -> None:
    ids = tokenizer.encode(f"one{EOS_TOKEN}two")
    assert tokenizer.eos_id is not None
    assert ids.count(tokenizer.eos_id) == 1


def test_tokenizer_vocab_matches_preset(tokenizer: Tokenizer) -> None:
    assert tokenizer.vocab_size == get_preset("tiny").vocab


def test_shipped_files_fit_the_size_budget() -> None:
    assert TINY_CHECKPOINT.stat().st_size + TOKENIZER_FILE.stat().st_size <= MAX_SHIPPED_BYTES


def test_record_matches_preset(record: dict) -> None:
    cfg = get_preset("tiny")
    for key in ("layers", "hidden", "heads", "kv_heads", "head_dim", "intermediate", "vocab",
                "context"):
        assert record["preset"][key] == getattr(cfg, key)
