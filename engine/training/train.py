"""Train the `tiny` preset's tokenizer and weights from the shipped corpus (assets/corpus).

The course's streaming demos need a model that writes readable text, and everything about it must
be reproducible on a laptop: so this script trains a byte-level BPE tokenizer (4096 tokens, with
<|endoftext|> between documents) and then the engine's own LlamaModel, through the very forward
pass the engine serves (`full_logits`, causal attention), on two CPU threads in about fifteen
minutes. The last ~2% of the corpus's documents are held out; the held-out loss recorded in
assets/tiny/training.json is computed by `heldout_loss` on the checkpoint as saved (weights
rounded to fp16 and reloaded), so a test can check the shipped files against it. Training is
AdamW with a warmup-then-cosine learning rate and a fixed seed, first on 256-token windows and
then briefly on 1024-token windows so the model has seen longer positions. Run
`python -m engine.training` (`--benchmark` measures tokens per second to choose the step count).

`--preset draft` trains the speculative-decoding draft model the same way, on the same corpus and
split, with tiny's tokenizer as shipped (a draft must speak its target's token ids), and writes
assets/draft/{model.safetensors, training.json}.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch
import torch.nn.functional as F
from tokenizers import Tokenizer as HFTokenizer
from tokenizers import decoders, models, pre_tokenizers, trainers

from ..config import (
    TOKENIZER_FILE,
    TRAINING_RECORD,
    ModelConfig,
    checkpoint_path,
    get_preset,
)
from ..model.model import LlamaModel, full_logits, load_checkpoint, save_checkpoint
from ..tokenizer import EOS_TOKEN
from .corpus import CORPUS_FILE, read_documents

HELDOUT_SHARE = 0.02
SAMPLE_PROMPTS = ("The function returns", "A hacker is", "If the file does not exist,")


@dataclass(frozen=True)
class TrainSettings:
    """Everything that decides the trained weights (with the preset and the corpus)."""

    steps: int = 600
    batch: int = 8
    seq_len: int = 256
    long_steps: int = 150  # the last steps train on long windows, same tokens per step
    long_seq_len: int = 1024
    lr: float = 2e-3
    min_lr_ratio: float = 0.1
    warmup: int = 40
    weight_decay: float = 0.1
    betas: tuple[float, float] = (0.9, 0.95)
    grad_clip: float = 1.0
    seed: int = 0
    eval_windows: int = 64  # held-out windows of seq_len tokens scored by heldout_loss

    def shape_at(self, step: int) -> tuple[int, int]:
        """(batch, sequence length) of a step: long windows in the last long_steps steps."""
        if step < self.steps - self.long_steps:
            return self.batch, self.seq_len
        return max(1, self.batch * self.seq_len // self.long_seq_len), self.long_seq_len

    def tokens(self) -> int:
        return sum(b * t for b, t in map(self.shape_at, range(self.steps)))


def split_documents(
    documents: list[str], share: float = HELDOUT_SHARE
) -> tuple[list[str], list[str]]:
    """(training, held-out): the held-out set is the fewest trailing documents holding at least
    `share` of the corpus's characters (the corpus is in hash order, so the tail is a fair
    sample)."""
    total = sum(len(d) for d in documents)
    held, cut = 0, len(documents)
    while cut > 0 and held < share * total:
        cut -= 1
        held += len(documents[cut])
    return documents[:cut], documents[cut:]


def train_tokenizer(documents: list[str], vocab: int) -> HFTokenizer:
    """Byte-level BPE with <|endoftext|> as its only special token; decode(encode(t)) == t."""
    tok = HFTokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab, special_tokens=[EOS_TOKEN], show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(documents, trainer=trainer)
    return tok


def encode_documents(tok: HFTokenizer, documents: list[str]) -> torch.Tensor:
    """One stream of token ids: each document followed by the end-of-text token."""
    eos = tok.token_to_id(EOS_TOKEN)
    ids: list[int] = []
    for encoding in tok.encode_batch(documents):
        ids.extend(encoding.ids)
        ids.append(eos)
    return torch.tensor(ids, dtype=torch.long)


def heldout_tokens(tok: HFTokenizer, corpus: Path = CORPUS_FILE) -> torch.Tensor:
    """The held-out token stream of a corpus file."""
    return encode_documents(tok, split_documents(read_documents(corpus))[1])


def init_weights(model: LlamaModel, seed: int) -> None:
    """GPT-2 style: normal(0, 0.02), residual output projections scaled by 1/sqrt(2 x layers)."""
    gen = torch.Generator().manual_seed(seed)
    residual_std = 0.02 / math.sqrt(2 * model.cfg.layers)
    for name, p in model.named_parameters():
        if name.endswith("norm.weight"):
            p.data.fill_(1.0)
        else:
            std = residual_std if name.endswith(("o_proj.weight", "down_proj.weight")) else 0.02
            p.data.normal_(0.0, std, generator=gen)


def lm_loss(model: LlamaModel, windows: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross entropy over windows (B, T + 1) of token ids."""
    logits = full_logits(model, windows[:, :-1])
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), windows[:, 1:].reshape(-1))


def sample_windows(
    tokens: torch.Tensor, batch: int, seq_len: int, gen: torch.Generator
) -> torch.Tensor:
    """`batch` random windows of seq_len + 1 consecutive tokens."""
    starts = torch.randint(0, len(tokens) - seq_len - 1, (batch,), generator=gen)
    return torch.stack([tokens[s:s + seq_len + 1] for s in starts.tolist()])


def heldout_windows(tokens: torch.Tensor, seq_len: int, max_windows: int) -> torch.Tensor:
    """The first max_windows non-overlapping windows of seq_len + 1 tokens (each window's first
    token is the previous window's last), in order: a fixed evaluation set."""
    count = min(max_windows, (len(tokens) - 1) // seq_len)
    return torch.stack([tokens[i * seq_len:(i + 1) * seq_len + 1] for i in range(count)])


@torch.no_grad()
def heldout_loss(
    model: LlamaModel, tokens: torch.Tensor, seq_len: int = 256, max_windows: int = 64,
    batch: int = 8,
) -> float:
    """Mean next-token cross entropy (nats) over the fixed held-out windows, computed in fp32."""
    windows = heldout_windows(tokens, seq_len, max_windows)
    total, count = 0.0, 0
    for chunk in windows.split(batch):
        n = chunk.shape[0] * seq_len
        total += lm_loss(model, chunk).double().item() * n
        count += n
    return total / count


def learning_rate(step: int, s: TrainSettings) -> float:
    """Linear warmup to s.lr, then cosine decay to s.lr x s.min_lr_ratio at the last step."""
    if step < s.warmup:
        return s.lr * (step + 1) / s.warmup
    progress = (step - s.warmup) / max(1, s.steps - 1 - s.warmup)
    cosine = 0.5 * (1 + math.cos(math.pi * progress))
    return s.lr * (s.min_lr_ratio + (1 - s.min_lr_ratio) * cosine)


def make_optimizer(model: LlamaModel, s: TrainSettings) -> torch.optim.AdamW:
    """AdamW; weight decay on matrices only (not on norm gains)."""
    matrices = [p for p in model.parameters() if p.dim() >= 2]
    vectors = [p for p in model.parameters() if p.dim() < 2]
    groups = [{"params": matrices, "weight_decay": s.weight_decay},
              {"params": vectors, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=s.lr, betas=s.betas, fused=False)


def train(
    model: LlamaModel, tokens: torch.Tensor, s: TrainSettings,
    log: Callable[[int, float, float], None] | None = None,
) -> list[float]:
    """Run s.steps optimizer steps on random windows of tokens; returns the loss of every step.
    log(step, loss, tokens per second) is called every 10 steps."""
    torch.manual_seed(s.seed)
    gen = torch.Generator().manual_seed(s.seed)
    opt = make_optimizer(model, s)
    model.train()
    losses, start, seen = [], time.perf_counter(), 0
    for step in range(s.steps):
        for group in opt.param_groups:
            group["lr"] = learning_rate(step, s)
        batch, seq_len = s.shape_at(step)
        loss = lm_loss(model, sample_windows(tokens, batch, seq_len, gen))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), s.grad_clip)
        opt.step()
        losses.append(loss.item())
        seen += batch * seq_len
        if log and (step % 10 == 0 or step == s.steps - 1):
            log(step, losses[-1], seen / (time.perf_counter() - start))
    model.eval()
    return losses


@torch.no_grad()
def greedy(model: LlamaModel, tok: HFTokenizer, prompt: str, new_tokens: int = 40) -> str:
    """The greedy continuation of a prompt, recomputed in full at every token (no cache)."""
    ids = tok.encode(prompt).ids
    eos = tok.token_to_id(EOS_TOKEN)
    for _ in range(new_tokens):
        next_id = int(full_logits(model, torch.tensor([ids]))[0, -1].argmax())
        if next_id == eos:
            break
        ids.append(next_id)
    return tok.decode(ids)


def reload(cfg: ModelConfig, path: Path) -> LlamaModel:
    """A fresh model holding a saved checkpoint (fp16 weights cast back to fp32)."""
    model = LlamaModel(cfg)
    load_checkpoint(model, path)
    model.eval()
    return model


def benchmark(cfg: ModelConfig, s: TrainSettings, steps: int = 6) -> dict:
    """Training tokens per second at both window lengths, on random weights and random tokens."""
    model = LlamaModel(cfg)
    init_weights(model, s.seed)
    tokens = torch.randint(0, cfg.vocab, (100_000,))
    rates = {}
    for batch, seq_len in (s.shape_at(0), s.shape_at(s.steps - 1)):
        short = TrainSettings(steps=steps, batch=batch, seq_len=seq_len, long_steps=0, warmup=1)
        start = time.perf_counter()
        train(model, tokens, short)
        rates[seq_len] = steps * batch * seq_len / (time.perf_counter() - start)
    return rates


def record(
    cfg: ModelConfig, s: TrainSettings, losses: list[float], timings: dict, heldout: dict,
    samples: dict, files: dict,
) -> dict:
    """The contents of training.json."""
    curve = [[i, round(sum(losses[i:i + 10]) / len(losses[i:i + 10]), 4)]
             for i in range(0, len(losses), 10)]
    return {
        "preset": asdict(cfg),
        "params": cfg.params,
        "settings": asdict(s),
        "tokens_seen": s.tokens(),
        "optimizer": "AdamW, warmup then cosine decay, grad clip, weight decay on matrices",
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        **timings,
        "train_loss_final": round(sum(losses[-20:]) / len(losses[-20:]), 4),
        "train_loss_curve": curve,
        **heldout,
        "samples_greedy": samples,
        **files,
    }



# The settings each trainable preset ships with (steps, batch and windows chosen with --benchmark
# so that a run takes about 15 minutes (tiny) or 10 minutes (draft) on two cores).
PRESET_SETTINGS = {
    "tiny": TrainSettings(),
    # 2 layers of width 128 (about 1M parameters): ~4x tiny's training tokens per second, so ~3x
    # its tokens in less time; the higher learning rate suits the smaller model.
    "draft": TrainSettings(steps=900, batch=16, long_steps=150, lr=3e-3),
}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m engine.training", description=__doc__)
    parser.add_argument("--preset", choices=list(PRESET_SETTINGS), default="tiny",
                        help="tiny (trains the tokenizer too) or draft (uses tiny's tokenizer)")
    parser.add_argument("--steps", type=int, default=None, help="default: the preset's")
    parser.add_argument("--long-steps", type=int, default=None, help="default: the preset's")
    parser.add_argument("--benchmark", action="store_true",
                        help="print training tokens per second and exit")
    parser.add_argument("--out", type=Path, default=None,
                        help="folder for model.safetensors, training.json (and tiny's "
                             "tokenizer.json); default assets/<preset>")
    return parser.parse_args(argv)


def settings_for(args: argparse.Namespace) -> TrainSettings:
    """The preset's shipped settings, with --steps / --long-steps if given."""
    s = PRESET_SETTINGS[args.preset]
    return replace(s, steps=s.steps if args.steps is None else args.steps,
                   long_steps=s.long_steps if args.long_steps is None else args.long_steps)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    torch.set_num_threads(2)
    cfg = get_preset(args.preset)
    s = settings_for(args)
    if args.benchmark:
        for seq_len, rate in benchmark(cfg, s).items():
            print(f"seq_len {seq_len}: {rate:.0f} tokens/s")
        return
    began = time.perf_counter()
    out = args.out or checkpoint_path(cfg).parent
    out.mkdir(parents=True, exist_ok=True)
    ckpt_path = out / checkpoint_path(cfg).name
    train_docs, held_docs = split_documents(read_documents(CORPUS_FILE))
    if args.preset == "tiny":
        tok_path = out / TOKENIZER_FILE.name
        tok = train_tokenizer(train_docs, cfg.vocab)
        tok.save(str(tok_path))
    else:  # a draft reads and writes the very token ids of its target
        tok_path = TOKENIZER_FILE
        tok = HFTokenizer.from_file(str(tok_path))
    tokens, held = encode_documents(tok, train_docs), encode_documents(tok, held_docs)
    print(f"tokenizer: {tok.get_vocab_size()} tokens; train {len(tokens)} tokens in "
          f"{len(train_docs)} documents, held out {len(held)} tokens in {len(held_docs)}")
    print(f"training {s.steps} steps, {s.tokens()} tokens")

    model = LlamaModel(cfg)
    init_weights(model, s.seed)
    train_start = time.perf_counter()
    losses = train(model, tokens, s, lambda step, loss, rate: print(
        f"step {step:5d}  loss {loss:.4f}  lr {learning_rate(step, s):.2e}  {rate:.0f} tok/s  "
        f"{time.perf_counter() - train_start:.0f} s", flush=True))
    train_s = time.perf_counter() - train_start
    save_checkpoint(model, ckpt_path)

    saved = reload(cfg, ckpt_path)  # every number below is of the shipped (fp16) weights
    heldout = {
        "heldout_loss": heldout_loss(saved, held, s.seq_len, s.eval_windows),
        "heldout_eval": {"seq_len": s.seq_len, "max_windows": s.eval_windows,
                         "windows": len(heldout_windows(held, s.seq_len, s.eval_windows)),
                         "heldout_share": HELDOUT_SHARE, "heldout_tokens": len(held),
                         "heldout_documents": len(held_docs)},
        "heldout_loss_long": heldout_loss(saved, held, s.long_seq_len, s.eval_windows),
    }
    samples = {p: greedy(saved, tok, p) for p in SAMPLE_PROMPTS}
    files = {"checkpoint_bytes": ckpt_path.stat().st_size,
             "tokenizer_bytes": tok_path.stat().st_size, "train_tokens": len(tokens),
             "tokenizer": "trained here" if args.preset == "tiny" else "tiny's, as shipped"}
    timings = {"train_wall_s": round(train_s, 1),
               "wall_s": round(time.perf_counter() - began, 1),
               "tokens_per_s": round(s.tokens() / train_s)}
    result = record(cfg, s, losses, timings, heldout, samples, files)
    (out / TRAINING_RECORD.name).write_text(json.dumps(result, indent=2) + "\n")
    print(f"held-out loss {heldout['heldout_loss']:.4f} "
          f"(long windows {heldout['heldout_loss_long']:.4f}); wall {timings['wall_s']} s")
    for prompt, text in samples.items():
        print(f"  {prompt!r} -> {text!r}")


if __name__ == "__main__":
    main()
