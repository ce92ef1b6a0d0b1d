"""A plain KV-cached decode loop, independent of the engine's paged machinery.

One contiguous cache tensor per layer, (batch, kv_heads, max_len, head_dim); `F.linear` with the
weights as stored; scaled_dot_product_attention; no scheduler, no block tables. It is what a
careful person writes first, which makes it two things: the correctness reference that the paged
engine must agree with, and the speed baseline the engine must not fall behind (bench/).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .model.model import LlamaModel


class ContiguousDecoder:
    """Batched greedy decoding of equal-length prompts with a contiguous KV cache."""

    def __init__(self, model: LlamaModel, batch: int, max_len: int):
        cfg = model.cfg
        self.model = model
        self.cfg = cfg
        weight = model.embed.weight
        shape = (cfg.layers, batch, cfg.kv_heads, max_len, cfg.head_dim)
        self.k = torch.zeros(shape, dtype=weight.dtype, device=weight.device)
        self.v = torch.zeros(shape, dtype=weight.dtype, device=weight.device)
        self.length = 0  # tokens cached so far (the same for every row)

    def _norm(self, norm, x):
        return F.rms_norm(x, (x.shape[-1],), norm.weight, norm.eps)

    @torch.inference_mode()
    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """Run (batch, n) new tokens after what is cached; returns logits (batch, n, vocab)."""
        cfg, m = self.cfg, self.model
        batch, n = ids.shape
        start, end = self.length, self.length + n
        positions = torch.arange(start, end, device=ids.device).expand(batch, n)
        x = m.embed(ids)
        q_size, kv_size = cfg.heads * cfg.head_dim, cfg.kv_heads * cfg.head_dim
        for i, layer in enumerate(m.layers):
            h = self._norm(layer.input_norm, x)
            q, k, v = F.linear(h, layer.attn.qkv_proj.weight).split([q_size, kv_size, kv_size], -1)
            q = rotate(q.reshape(batch, n, cfg.heads, cfg.head_dim), positions, cfg)
            k = rotate(k.reshape(batch, n, cfg.kv_heads, cfg.head_dim), positions, cfg)
            v = v.reshape(batch, n, cfg.kv_heads, cfg.head_dim)
            self.k[i, :, :, start:end] = k.transpose(1, 2)
            self.v[i, :, :, start:end] = v.transpose(1, 2)
            attn = F.scaled_dot_product_attention(
                q.transpose(1, 2), self.k[i, :, :, :end], self.v[i, :, :, :end],
                is_causal=n > 1 and start == 0, enable_gqa=True,
                attn_mask=None if n == 1 or start == 0 else _chunk_mask(start, n, ids.device),
            )
            attn = attn.transpose(1, 2).reshape(batch, n, q_size)
            x = x + F.linear(attn, layer.attn.o_proj.weight)
            h = self._norm(layer.post_attn_norm, x)
            gate, up = F.linear(h, layer.mlp.gate_up_proj.weight).chunk(2, -1)
            x = x + F.linear(F.silu(gate) * up, layer.mlp.down_proj.weight)
        self.length = end
        x = self._norm(m.norm, x)
        return F.linear(x, m.embed.weight).float()

    def generate(self, prompts: torch.Tensor, new_tokens: int) -> tuple[torch.Tensor, list]:
        """Greedy: returns (batch, new_tokens) tokens and the logits that chose each."""
        logits = self.forward(prompts)[:, -1]
        chosen, all_logits = [logits.argmax(-1)], [logits]
        for _ in range(new_tokens - 1):
            logits = self.forward(chosen[-1][:, None])[:, -1]
            chosen.append(logits.argmax(-1))
            all_logits.append(logits)
        return torch.stack(chosen, 1), all_logits


def rotate(x: torch.Tensor, positions: torch.Tensor, cfg) -> torch.Tensor:
    """Rotary positions in the textbook rotate-half form, computed here from the angles, so the
    model's own four-op form is checked against it."""
    half = cfg.head_dim // 2
    inv_freq = 1.0 / (cfg.rope_theta ** (torch.arange(half, dtype=torch.float32) * 2 / cfg.head_dim))
    angles = positions[..., None].float() * inv_freq  # (batch, n, half)
    cos, sin = angles.cos()[..., None, :].to(x.dtype), angles.sin()[..., None, :].to(x.dtype)
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)


def _chunk_mask(start: int, n: int, device) -> torch.Tensor:
    rows = torch.arange(n, device=device)[:, None] + start
    return torch.arange(start + n, device=device)[None, :] <= rows
