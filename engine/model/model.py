"""A Llama-family decoder in plain torch: RMSNorm, rotary positions, grouped-query attention,
SwiGLU MLP, tied input and output embeddings.

The model does not know how attention over past tokens is done: each layer projects q, k and v
and hands them to an `attend(layer, q, k, v)` function chosen by the caller (or, where that
function offers `fused_qkv(layer, qkv, angles)`, hands it the projection before rotary: the
engine's C++ decode step does rotary, cache writes and attention in one call; and where it offers
`decode_inputs()`, a decode-only step of the whole model may be one C++ call: decode_logits).
Training and the full-recompute reference pass causal attention over whole sequences; the engine
passes paged attention over its KV cache; the reference loop passes a contiguous cache. One set
of weights, one definition of the network, several ways of remembering the past.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from torch import nn

from ..config import ModelConfig
from ..steps import Steps, run_steps
from .layers import Linear, RMSNorm, Rotary
from .matmul_plan import matmul_plan_steps
from .moe import MoE

# attend(layer_index, q (..., T, H, D), k (..., T, KVH, D), v (..., T, KVH, D)) -> (..., T, H * D)
Attend = Callable[[int, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig, rotary: Rotary):
        super().__init__()
        self.cfg = cfg
        self.rotary = rotary
        self.qkv_proj = Linear(cfg.hidden, (cfg.heads + 2 * cfg.kv_heads) * cfg.head_dim)
        self.o_proj = Linear(cfg.heads * cfg.head_dim, cfg.hidden)

    def project(self, x: torch.Tensor, angles):
        """q, k, v for x (..., T, hidden), with rotary positions (Rotary.angles) applied."""
        cfg = self.cfg
        qkv = self.qkv_proj(x)
        q_size, kv_size = cfg.heads * cfg.head_dim, cfg.kv_heads * cfg.head_dim
        qk, v = qkv.split([q_size + kv_size, kv_size], dim=-1)
        lead = x.shape[:-1]
        # q and k heads side by side get their rotation in one go (fewer ops per layer)
        qk = self.rotary.apply(qk.reshape(*lead, cfg.heads + cfg.kv_heads, cfg.head_dim), angles)
        q, k = qk.split([cfg.heads, cfg.kv_heads], dim=-2)
        return q, k, v.reshape(*lead, cfg.kv_heads, cfg.head_dim)


class MLP(nn.Module):
    """SwiGLU: down(silu(gate(x)) * up(x)), with gate and up fused in one matrix."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.gate_up_proj = Linear(cfg.hidden, 2 * cfg.intermediate)
        self.down_proj = Linear(cfg.intermediate, cfg.hidden)
        self.silu_mul: Callable | None = None  # the C++ one-call activation (use_fused_ops)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate_up = self.gate_up_proj(x)
        if self.silu_mul is not None:
            return self.down_proj(self.silu_mul(gate_up))
        gate, up = gate_up.chunk(2, dim=-1)
        return self.down_proj(F.silu(gate) * up)


class DecoderLayer(nn.Module):
    def __init__(self, index: int, cfg: ModelConfig, rotary: Rotary):
        super().__init__()
        self.index = index
        self.input_norm = RMSNorm(cfg.hidden, cfg.norm_eps)
        self.attn = Attention(cfg, rotary)
        self.post_attn_norm = RMSNorm(cfg.hidden, cfg.norm_eps)
        self.mlp = MoE(cfg) if cfg.experts else MLP(cfg)  # engine/model/moe.py

    def forward(self, x: torch.Tensor, angles, attend: Attend,
                pending: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """The layer on the residual stream x plus `pending` (the previous layer's MLP output,
        not yet added; None for the first layer). Returns the stream and this layer's own MLP
        output, again not added: each residual add happens in the norm that reads its result
        (RMSNorm.add_forward), one call where the fused ops are in use."""
        if pending is None:
            h = self.input_norm(x)
        else:
            x, h = self.input_norm.add_forward(x, pending)
        fused = getattr(attend, "fused_qkv", None)  # one C++ call in the engine's decode steps
        if fused is not None:
            out = fused(self.index, self.attn.qkv_proj(h), angles)
        else:
            q, k, v = self.attn.project(h, angles)
            out = attend(self.index, q, k, v)
        x, h = self.post_attn_norm.add_forward(x, self.attn.o_proj(out))
        return x, self.mlp(h)


class LlamaModel(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.rotary = Rotary(cfg.head_dim, cfg.context, cfg.rope_theta)
        self.embed = nn.Embedding(cfg.vocab, cfg.hidden)
        self.layers = nn.ModuleList(DecoderLayer(i, cfg, self.rotary) for i in range(cfg.layers))
        self.norm = RMSNorm(cfg.hidden, cfg.norm_eps)
        self.lm_head = Linear(cfg.hidden, cfg.vocab)
        self.lm_head.weight = self.embed.weight  # tied, as in GPT-2 and Llama-3.2-1B
        self.decode_model: Callable | None = None  # the C++ one-call decode step (use_fused_ops)
        self.decode_weights: list[torch.Tensor] = []  # its weights, in its order

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, attend: Attend):
        """Hidden states after the final norm, for tokens of any leading shape (..., T)."""
        x = self.embed(input_ids)
        angles = self.rotary.angles(positions, x.dtype)  # once per step, for every layer
        pending = None
        for layer in self.layers:
            x, pending = layer(x, angles, attend, pending)
        return self.norm.add_forward(x, pending)[1]

    def decode_logits(self, input_ids: torch.Tensor, positions: torch.Tensor,
                      attend) -> torch.Tensor | None:
        """Logits of a decode-only step (flat rows, one token each) in one C++ call, from token
        ids to the output projection, where `attend` offers the step's `decode_inputs` (the
        engine's cpp backend) and the measured plan covers this many rows: the call does every
        product in the layout the plan picks (one plan serves every product: matmul_plan);
        else None, and the caller runs the layers one by one. At batch 1 the Python around each
        layer (its arguments, its op calls) costs more than tiny's arithmetic, so no layout
        may bring it back."""
        inputs = getattr(attend, "decode_inputs", None)
        how = self.lm_head.step_product(input_ids.shape[0])
        if self.decode_model is None or inputs is None or how is None:
            return None
        return self.decode_model(input_ids, positions, self.embed.weight, self.rotary.cos,
                                 self.rotary.sin, self.decode_weights, self.cfg.norm_eps,
                                 *inputs(), self.cfg.heads, how)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Logits in float32 (a conversion op only where the model runs in half precision)."""
        logits = self.lm_head(hidden)
        return logits if logits.dtype == torch.float32 else logits.float()

    def init_random(self, seed: int = 0) -> None:
        """Random weights for timing-only presets (scaled so activations stay finite)."""
        gen = torch.Generator().manual_seed(seed)
        for name, p in self.named_parameters():
            if name.endswith("norm.weight"):
                p.data.fill_(1.0)
            else:
                p.data.normal_(0.0, 0.02, generator=gen)

    def quantize_int8(self, kernel) -> None:
        """Every linear layer's weight held as int8 (engine/model/int8.py), the output projection
        too; the embedding table stays float32 (a step looks up a few of its rows)."""
        for m in self.modules():
            if isinstance(m, Linear):
                m.quantize_int8(kernel)

    def use_fused_ops(self, ops) -> None:
        """Run every residual add with its norm, and every SwiGLU activation, as one C++ call
        each, and a decode-only step of up to MAX_TUNED_ROWS rows as one call (decode_logits;
        cpu_kernel.fused_layer_ops; float32 CPU inference only: the ops have no autograd). At
        batch 1 a small model's step costs mostly op calls: this leaves a handful."""
        if self.embed.weight.dtype != torch.float32 or self.embed.weight.device.type != "cpu":
            raise ValueError("the fused C++ layer ops run float32 models on the CPU only")
        for m in self.modules():
            if isinstance(m, RMSNorm):
                m.fused_add = ops.add_rms_norm
            elif isinstance(m, MLP):
                m.silu_mul = ops.silu_mul
        # float weights (int8 ones have their own kernel), and a dense MLP in every layer (the
        # one-call step has no router: an MoE model runs its layers one by one)
        if self.lm_head.weight is not None and not self.cfg.experts:
            self.decode_model = ops.decode_model
            self.decode_weights = [w for layer in self.layers for w in (
                layer.input_norm.weight, layer.attn.qkv_proj.weight, layer.attn.o_proj.weight,
                layer.post_attn_norm.weight, layer.mlp.gate_up_proj.weight,
                layer.mlp.down_proj.weight)] + [self.norm.weight, self.lm_head.weight]

    def prepare_for_inference(self) -> None:
        """Freeze, and on CPU give every float linear layer its measured plan for few-row
        products."""
        run_steps(self.prepare_for_inference_steps())

    def prepare_for_inference_steps(self) -> Steps[None]:
        """prepare_for_inference in steps (engine.steps): the plan's timing, one batch size at
        a time, when this machine has no plan for the model's shapes yet."""
        self.eval()
        self.requires_grad_(False)
        linears = self.planned_linears()
        if self.embed.weight.device.type == "cpu" and linears:  # in step order
            plan = yield from matmul_plan_steps([m.weight.detach() for m in linears])
            if plan is None:  # not timed now (matmul_plan.plain_plans_untimed): torch's own
                return
            self.use_plan(plan)
            if "x_wt" in plan:  # a copy of every weight made: a step of its own
                yield "weights laid out for small batches"

    def planned_linears(self) -> list[Linear]:
        """The linear layers a matrix-product plan serves (float weights), in step order."""
        return [m for m in self.modules() if isinstance(m, Linear) and m.qweight is None]

    def use_plan(self, plan: list[str]) -> None:
        """Every planned layer follows `plan` (a variant for each row count 1..MAX_TUNED_ROWS)."""
        for m in self.planned_linears():
            m.prepare_for_cpu_decode(plan)

    def held_bytes(self) -> int:
        """Bytes of memory the model's tensors hold, each storage once: its weights as held
        (float, or int8 with scales), transposed copies a plan keeps, and its buffers (the
        rotary tables). What keeping the model costs a process (engine.lab.jobs.engines)."""
        tensors = [*self.parameters(), *self.buffers()]
        for m in self.modules():
            if isinstance(m, Linear):
                tensors += [t for t in (m.weight_t, m.qweight, m.scale) if t is not None]
        storages = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in tensors}
        return sum(storages.values())

    def weight_bytes(self) -> int:
        """Bytes one decode step must read: every linear layer's weight as held (the output
        projection's is the tied embedding table, counted once) and the norms' weights. The
        embedding lookup reads only a few rows: not counted."""
        linears = sum(m.weight_bytes() for m in self.modules() if isinstance(m, Linear))
        norms = sum(m.weight.numel() * m.weight.element_size()
                    for m in self.modules() if isinstance(m, RMSNorm))
        return linears + norms


def causal_attend(layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Attention of whole sequences over themselves, (B, T, H, D): training and full recompute."""
    out = F.scaled_dot_product_attention(
        q.transpose(-3, -2), k.transpose(-3, -2), v.transpose(-3, -2),
        is_causal=True, enable_gqa=True,
    )
    out = out.transpose(-3, -2)
    return out.reshape(*out.shape[:-2], -1)


def full_logits(model: LlamaModel, token_ids: torch.Tensor) -> torch.Tensor:
    """Logits at every position of (B, T) token ids, recomputed from scratch with no cache."""
    positions = torch.arange(token_ids.shape[-1], device=token_ids.device).expand_as(token_ids)
    return model.logits(model(token_ids, positions, causal_attend))


def save_checkpoint(model: LlamaModel, path: Path, dtype: torch.dtype = torch.float16) -> None:
    """Weights as safetensors (fp16 by default, to keep the shipped file small)."""
    tensors = {
        name: p.detach().to(dtype).contiguous()
        for name, p in model.named_parameters()
        if name != "lm_head.weight"
    }
    save_file(tensors, str(path))


def load_checkpoint(model: LlamaModel, path: Path) -> None:
    tensors = load_file(str(path))
    state = {name: t.to(model.embed.weight.dtype) for name, t in tensors.items()}
    missing, unexpected = model.load_state_dict(state, strict=False)
    missing = [m for m in missing if m != "lm_head.weight"]
    if missing or unexpected:
        raise ValueError(f"checkpoint {path} does not match the model: {missing} {unexpected}")
