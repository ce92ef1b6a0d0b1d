"""The mixture-of-experts MLP against a per-token reference, its router's top-k, and the engine
serving an MoE preset with its paged KV cache and batching (engine/model/moe.py)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from engine.config import EngineConfig, get_preset
from engine.llm_engine import LLMEngine
from engine.model.model import LlamaModel, full_logits
from engine.model.moe import MoE, experts_read, route
from tests.engine.model.moe_plan import seed_step_plan

CFG = get_preset("moe-tiny")


def moe_layer(seed: int = 0) -> MoE:
    torch.manual_seed(seed)
    layer = MoE(CFG)
    for p in layer.parameters():
        p.data.normal_(0.0, 0.2)
    return layer.eval()


def reference(layer: MoE, x: torch.Tensor) -> torch.Tensor:
    """One token at a time: its router logits, its top-k experts each run alone, the weighted
    sum with a softmax over the chosen logits."""
    out = []
    for token in x:
        logits = token @ layer.router.weight.T
        chosen = sorted(range(len(layer.experts)), key=lambda e: -float(logits[e]))[:layer.top_k]
        weights = torch.softmax(logits[chosen], dim=0)
        total = torch.zeros_like(token)
        for w, e in zip(weights, chosen):
            expert = layer.experts[e]
            gate, up = (token @ expert.gate_up_proj.weight.T).chunk(2)
            total += w * ((F.silu(gate) * up) @ expert.down_proj.weight.T)
        out.append(total)
    return torch.stack(out)


@pytest.mark.parametrize("tokens", [1, 3, 17])
def test_moe_layer_equals_a_per_token_reference(tokens):
    layer = moe_layer()
    x = torch.randn(tokens, CFG.hidden, generator=torch.Generator().manual_seed(tokens))
    with torch.no_grad():
        got, want = layer(x), reference(layer, x)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_moe_layer_keeps_leading_shape():
    layer = moe_layer()
    x = torch.randn(2, 5, CFG.hidden)
    with torch.no_grad():
        assert torch.equal(layer(x), layer(x.reshape(10, -1)).reshape(2, 5, -1))


def test_route_takes_the_top_k_and_normalizes_over_them():
    logits = torch.tensor([[0.0, 3.0, 1.0, 2.0], [5.0, -1.0, 4.0, 0.0]])
    weights, chosen = route(logits, 2)
    assert chosen.tolist() == [[1, 3], [0, 2]]
    expected = torch.softmax(torch.tensor([[3.0, 2.0], [5.0, 4.0]]), dim=-1)
    torch.testing.assert_close(weights, expected)
    torch.testing.assert_close(weights.sum(-1), torch.ones(2))


def test_experts_read_counts_distinct_picks():
    layer = moe_layer()
    x = torch.randn(1, CFG.hidden)
    with torch.no_grad():
        layer(x)
    assert layer.experts_read == CFG.top_k  # one token reads exactly its k experts
    x = torch.randn(64, CFG.hidden, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        _, chosen = route(layer.router(x), CFG.top_k)
        layer(x)
    assert layer.experts_read == len(set(chosen.flatten().tolist()))


def test_moe_preset_shapes():
    moe, dense = get_preset("moe-mini"), get_preset("moe-mini-dense")
    router = moe.layers * moe.hidden * moe.experts
    assert moe.active_params - router == dense.active_params == dense.params
    assert moe.params * 4 > 10 * 32 * 2**20  # all experts far beyond a 32 MiB last-level cache
    assert dense.params * 4 > 2 * 32 * 2**20  # and the active part beyond it too
    model = LlamaModel(CFG)
    assert sum(p.numel() for p in model.parameters()) == CFG.params  # the tied table once


@pytest.fixture(scope="module")
def moe_engine() -> LLMEngine:
    seed_step_plan(backend="torch")
    return LLMEngine(EngineConfig(preset="moe-tiny", device="cpu", backend="torch",
                                  kv_budget_bytes=8 * 2**20))


def greedy(engine: LLMEngine, prompts: list[list[int]], new_tokens: int) -> list[list[int]]:
    """Greedy decode of several prompts in one batch through the engine's paged KV cache."""
    seqs = [engine.new_sequence(p, new_tokens, ignore_eos=True) for p in prompts]
    try:
        for seq in seqs:
            assert engine.reserve(seq, seq.num_uncomputed)
        engine.step([], [(seq, seq.num_uncomputed) for seq in seqs])
        while not all(seq.finished for seq in seqs):
            live = [seq for seq in seqs if not seq.finished]
            for seq in live:
                assert engine.reserve(seq, 1)
            engine.step(live, [])
        return [list(seq.output_ids) for seq in seqs]
    finally:
        for seq in seqs:
            engine.release(seq)


def test_engine_decodes_an_moe_preset_as_a_full_recompute_does(moe_engine):
    prompts = [[5, 9, 33, 7], [100, 2, 3], [8] * 20]
    batched = greedy(moe_engine, prompts, 6)
    for prompt, out in zip(prompts, batched):
        assert greedy(moe_engine, [prompt], 6) == [out]  # alone equals inside the batch
        ids = torch.tensor([prompt + out])
        with torch.no_grad():
            logits = full_logits(moe_engine.model, ids)[0, len(prompt) - 1:-1]
        assert logits.argmax(-1).tolist() == out  # paged decode equals a full recompute
    assert moe_engine.blocks.num_used == 0


def test_a_decode_step_reports_the_experts_it_read(moe_engine):
    greedy(moe_engine, [[5, 9, 33]], 2)
    reads = experts_read(moe_engine.model)
    assert len(reads) == CFG.layers and all(r == CFG.top_k for r in reads)
