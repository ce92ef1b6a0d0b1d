"""A decode step's op calls: at batch 1 a small model's step costs mostly the framework's few
microseconds per op call, not arithmetic (bench/engine/step_overhead.py times it). Counted with
torch.profiler, so the check does not depend on the machine's load. The weight products are
pinned to each layout a plan may pick, so the count does not follow the machine's tuned plan."""

from __future__ import annotations

import pytest
from torch.profiler import ProfilerActivity, profile

from engine.model.layers import Linear
from engine.model.matmul_plan import MAX_TUNED_ROWS, STEP_PRODUCTS


def decode_step_op_calls(engine, batch: int, variant: str = "linear") -> int:
    for module in engine.model.modules():
        if isinstance(module, Linear):
            module.plan = [variant] * MAX_TUNED_ROWS
    seqs = [engine.new_sequence([5 + i, 6, 7, 8], 8, ignore_eos=True) for i in range(batch)]
    try:
        for seq in seqs:
            engine.reserve(seq, seq.num_uncomputed)
        engine.step([], [(seq, seq.num_uncomputed) for seq in seqs])
        for _ in range(2):
            for seq in seqs:
                engine.reserve(seq, 1)
            engine.step(seqs, [])
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for seq in seqs:
                engine.reserve(seq, 1)
            engine.step(seqs, [])
    finally:
        for seq in seqs:
            engine.release(seq)
    return sum(1 for event in prof.events() if event.cpu_parent is None)


@pytest.mark.parametrize("variant", sorted(STEP_PRODUCTS))
@pytest.mark.parametrize("batch", [1, 3])
def test_cpp_decode_step_is_one_call_whatever_the_plan(tiny_engine_factory, cpp_kernel, batch,
                                                       variant):
    """Whichever layout the plan picks for the products, the model's part of a decode step is
    one C++ call (decode_model runs the layout): only the step's inputs, that call and the
    argmax are left, so a slower VM's per-op cost does not set the step."""
    calls = decode_step_op_calls(tiny_engine_factory(backend="cpp"), batch, variant)
    assert calls <= 12, calls  # 9 here (torch 2.13; 62 with a call per op of each layer)


def test_torch_decode_step_makes_few_op_calls(tiny_engine_factory):
    """Plain torch attention: the rotary, cache writes and attention as separate ops."""
    calls = decode_step_op_calls(tiny_engine_factory(backend="torch"), 1)
    assert calls <= 235, calls  # 225 here (torch 2.13)
