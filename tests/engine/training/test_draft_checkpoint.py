"""The shipped draft model (speculative decoding): it loads, matches its training record, speaks
tiny's tokenizer, and stays within the 5 MB a shipped draft may take."""

from __future__ import annotations

import json

import pytest
from tokenizers import Tokenizer as HFTokenizer

from engine.config import DRAFTS, PRESETS, TOKENIZER_FILE, checkpoint_path, get_preset
from engine.model.model import LlamaModel, load_checkpoint
from engine.training.train import heldout_loss, heldout_tokens

DRAFT = get_preset("draft")
MAX_DRAFT_BYTES = 5 * 1024 * 1024


@pytest.fixture(scope="module")
def record() -> dict:
    return json.loads((checkpoint_path(DRAFT).parent / "training.json").read_text())


def test_draft_reproduces_recorded_heldout_loss(record: dict) -> None:
    model = LlamaModel(DRAFT)
    load_checkpoint(model, checkpoint_path(DRAFT))
    model.eval()
    tokens = heldout_tokens(HFTokenizer.from_file(str(TOKENIZER_FILE)))
    evaluation = record["heldout_eval"]
    assert len(tokens) == evaluation["heldout_tokens"]
    loss = heldout_loss(model, tokens, evaluation["seq_len"], evaluation["max_windows"])
    assert loss == pytest.approx(record["heldout_loss"], rel=1e-3)
    assert loss < 6.5  # it learned: a model that learned nothing scores ln(4096) = 8.3


def test_draft_is_small_and_shaped_as_recorded(record: dict) -> None:
    assert checkpoint_path(DRAFT).stat().st_size <= MAX_DRAFT_BYTES
    for key in ("layers", "hidden", "heads", "kv_heads", "head_dim", "intermediate", "vocab",
                "context"):
        assert record["preset"][key] == getattr(DRAFT, key)
    assert DRAFT.vocab == PRESETS["tiny"].vocab and DRAFT.context >= PRESETS["tiny"].context
    assert "draft" in DRAFTS and "draft" not in PRESETS  # the lessons' presets stay as they were
