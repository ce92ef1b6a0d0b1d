"""What int8 weights cost in quality, measured on the trained tiny model: its held-out loss with
float32 and with int8 weights, and how often the two pick the same next token.

Both are read on the corpus's held-out windows (the ones training scored, engine/training), with
the whole window's logits at once: the agreement is teacher-forced (both models see the same
text, so one disagreement does not send the rest of a generation down another path), which makes
it a property of the weights, not of one prompt.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F

from .config import TOKENIZER_FILE
from .llm_engine import build_model, int8_kernel_for
from .model.model import LlamaModel, full_logits

SEQ_LEN, WINDOWS, BATCH = 256, 16, 4


@dataclass(frozen=True)
class Int8Quality:
    preset: str
    windows: int  # held-out windows of seq_len + 1 tokens
    seq_len: int
    positions: int  # next-token predictions compared
    loss_fp32: float  # mean next-token cross entropy, nats
    loss_int8: float
    agreement: float  # share of positions where int8's top token is float32's

    def to_json(self) -> dict:
        return asdict(self)


def heldout(windows: int = WINDOWS, seq_len: int = SEQ_LEN) -> torch.Tensor:
    """The first `windows` held-out windows (B, seq_len + 1) of the corpus, as training scores
    them."""
    from tokenizers import Tokenizer as HFTokenizer

    from .training.train import heldout_tokens, heldout_windows

    tokens = heldout_tokens(HFTokenizer.from_file(str(TOKENIZER_FILE)))
    return heldout_windows(tokens, seq_len, windows)


@torch.inference_mode()
def compare(fp32: LlamaModel, int8: LlamaModel, windows: torch.Tensor) -> tuple[float, float, float]:
    """(loss fp32, loss int8, top-1 agreement) over the windows' next-token predictions."""
    totals = torch.zeros(3, dtype=torch.float64)
    for chunk in windows.split(BATCH):
        inputs, targets = chunk[:, :-1], chunk[:, 1:].reshape(-1)
        a, b = (full_logits(m, inputs).reshape(targets.numel(), -1) for m in (fp32, int8))
        totals += torch.tensor([F.cross_entropy(a, targets, reduction="sum").item(),
                                F.cross_entropy(b, targets, reduction="sum").item(),
                                (a.argmax(-1) == b.argmax(-1)).sum().item()], dtype=torch.float64)
    count = windows.shape[0] * (windows.shape[1] - 1)
    loss_fp32, loss_int8, same = (totals / count).tolist()
    return loss_fp32, loss_int8, same


def int8_quality(preset: str = "tiny", windows: int = WINDOWS,
                 seq_len: int = SEQ_LEN) -> Int8Quality:
    """Load the trained preset twice, float32 and int8 (CPU; the int8 kernel must be built), and
    compare them on the held-out windows."""
    kernel = int8_kernel_for("cpu", torch.float32)
    fp32 = build_model(preset, "cpu")
    int8 = build_model(preset, "cpu", int8_kernel=kernel)
    data = heldout(windows, seq_len)
    loss_fp32, loss_int8, agreement = compare(fp32, int8, data)
    return Int8Quality(preset, data.shape[0], seq_len, data.shape[0] * seq_len, loss_fp32,
                       loss_int8, agreement)
