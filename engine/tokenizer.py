"""The byte-level BPE tokenizer trained with the tiny model (assets/tiny/tokenizer.json)."""

from __future__ import annotations

from pathlib import Path

from tokenizers import Tokenizer as _HFTokenizer

from .config import TOKENIZER_FILE

EOS_TOKEN = "<|endoftext|>"


class Tokenizer:
    def __init__(self, path: Path = TOKENIZER_FILE):
        if not Path(path).exists():
            raise FileNotFoundError(
                f"tokenizer not found at {path}: train it with `python -m engine.training`"
            )
        self._tok = _HFTokenizer.from_file(str(path))
        self.eos_id = self._tok.token_to_id(EOS_TOKEN)
        self.vocab_size = self._tok.get_vocab_size()

    def encode(self, text: str) -> list[int]:
        return self._tok.encode(text).ids

    def decode(self, ids: list[int]) -> str:
        return self._tok.decode(ids)


class IncrementalDecoder:
    """Turns a growing list of token ids into text pieces as they arrive. Byte-level tokens can
    end inside a multi-byte character; such a piece is held back until the character completes."""

    def __init__(self, tokenizer: Tokenizer):
        self.tokenizer = tokenizer
        self.ids: list[int] = []
        self.text = ""

    def push(self, token_id: int) -> str:
        self.ids.append(token_id)
        text = self.tokenizer.decode(self.ids)
        if text.endswith("\ufffd"):
            return ""
        piece, self.text = text[len(self.text):], text
        return piece
