"""Work and traffic of one engine step, from the model's shape: the x and y of a roofline.

Pure Python (no torch), so pages can state and apply the same formulas the worker uses. `shape`
is one preset as the engine's `info` job describes it (params, layers, hidden, heads, head_dim,
vocab, weight_bytes, kv_bytes_per_token).

Decode step, batch B, each sequence holding about c cached tokens:
    FLOPs ~ 2 x B x P                        every weight multiplies each sequence's one token
          + 4 x B x c x heads x head dim x layers     attention over the cache (scores, values)
    bytes ~ P x bytes per weight + B x c x KV bytes per token
Prefill pass, batch B of L-token prompts (logits only for each prompt's last token):
    FLOPs ~ 2 x B x L x (P - V x hidden)     every weight but the embedding, for every token
          + 2 x B x V x hidden               one row of logits per prompt
          + 4 x B x L(L+1)/2 x heads x head dim x layers   causal attention
    bytes ~ P x bytes per weight + B x L x KV bytes per token   (weights read, KV written)
Activations are left out of the bytes: they are small beside the weights at these sizes.
Arithmetic intensity = FLOPs / bytes. The roof: attainable FLOP/s = min(peak, bandwidth x
intensity). A step can take no less than bytes / bandwidth, nor less than FLOPs / peak.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class StepCost:
    flops: float
    bytes: float

    @property
    def intensity(self) -> float:
        """FLOPs per byte moved."""
        return self.flops / self.bytes

    def achieved_gflops(self, seconds: float) -> float:
        return self.flops / seconds / 1e9

    def floor_ms(self, bandwidth_gbs: float, peak_gflops: float | None = None) -> float:
        """The fastest this step could be: bytes / bandwidth (and FLOPs / peak if larger)."""
        floor = self.bytes / (bandwidth_gbs * 1e9)
        if peak_gflops:
            floor = max(floor, self.flops / (peak_gflops * 1e9))
        return 1000 * floor


def _attention_flops(shape: dict, pairs: float) -> float:
    """4 FLOPs per (query, key) pair per head dim per head per layer: q.k, then p x v."""
    return 4.0 * pairs * shape["heads"] * shape["head_dim"] * shape["layers"]


def decode_cost(shape: dict, batch: int, context: float) -> StepCost:
    """One decode step of `batch` sequences, each attending to about `context` cached tokens."""
    flops = 2.0 * shape["params"] * batch + _attention_flops(shape, batch * context)
    nbytes = shape["weight_bytes"] + batch * context * shape["kv_bytes_per_token"]
    return StepCost(flops, float(nbytes))


def prefill_cost(shape: dict, prompt_len: int, batch: int = 1) -> StepCost:
    """One prefill pass over `batch` prompts of `prompt_len` tokens (causal attention)."""
    embedding = shape["vocab"] * shape["hidden"]
    flops = (2.0 * batch * prompt_len * (shape["params"] - embedding)
             + 2.0 * batch * embedding
             + _attention_flops(shape, batch * prompt_len * (prompt_len + 1) / 2))
    nbytes = shape["weight_bytes"] + batch * prompt_len * shape["kv_bytes_per_token"]
    return StepCost(flops, float(nbytes))


def decode_context(prompt_len: int, new_tokens: int) -> float:
    """The mean cached length over a sweep point's decode steps (engine.sweep uses it)."""
    return prompt_len + new_tokens / 2


def roof_gflops(intensity: float, bandwidth_gbs: float, peak_gflops: float) -> float:
    """Attainable GFLOP/s at an arithmetic intensity: min(peak, bandwidth x intensity)."""
    return min(peak_gflops, bandwidth_gbs * intensity)


def ridge_point(bandwidth_gbs: float, peak_gflops: float) -> float:
    """The intensity (FLOP/byte) where the two roofs meet."""
    return peak_gflops / bandwidth_gbs
