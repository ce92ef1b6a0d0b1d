"""The split-KV Triton decode kernel against the torch reference (interpreter on CPU)."""

import pytest
import torch

pytest.importorskip("triton")

from engine.config import ModelConfig  # noqa: E402
from engine.model.attention import AttentionBatch, PagedAttention, paged_decode_torch  # noqa: E402
from engine.model.kv_cache import PagedKVCache  # noqa: E402
from engine.model.triton_attention import (  # noqa: E402
    MAX_SPLITS,
    _paged_decode,
    choose_splits,
    paged_decode_triton,
    split_kernel_warps,
)
from engine.model_runner import build_batch  # noqa: E402
from engine.sequence import Sequence  # noqa: E402
from tests.engine.model.paged_cases import CASES, make_case, poisoned  # noqa: E402

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
TOL = {torch.float32: dict(atol=1e-5, rtol=1e-5), torch.float16: dict(atol=2e-3, rtol=2e-3)}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=["fp32", "fp16"])
@pytest.mark.parametrize("case", list(CASES.values()), ids=list(CASES))
def test_matches_reference(case, dtype):
    lens, heads, kv_heads, head_dim = case
    args = make_case(lens, heads, kv_heads, head_dim, dtype, device=DEVICE)
    out = paged_decode_triton(*args)
    ref = paged_decode_torch(*args)
    assert out.dtype == dtype and out.shape == ref.shape
    torch.testing.assert_close(out, ref, **TOL[dtype])


def test_int64_block_tables_as_the_runner_builds_them():
    q, k_cache, v_cache, tables, seq_lens, max_len = make_case(*CASES["ragged"], torch.float32,
                                                               device=DEVICE)
    args = (q, k_cache, v_cache, tables.long(), seq_lens, max_len)
    torch.testing.assert_close(paged_decode_triton(*args), paged_decode_torch(*args),
                               **TOL[torch.float32])


def test_reads_each_sequence_only_to_its_own_length():
    """Blocks past a sequence's length (the block table's padding) and slots past it in its last
    block hold NaN: the kernel reads the blocks in place, only as far as each sequence's own
    length, so none of it reaches the output. A padded gather would read them (cost: batch x
    longest) and turn the output into NaN."""
    case = make_case([300, 7, 20, 9, 16], 8, 2, 32, torch.float32, seed=7, device=DEVICE)
    out = paged_decode_triton(*poisoned(case))
    assert not torch.isnan(out).any()
    torch.testing.assert_close(out, paged_decode_torch(*case), **TOL[torch.float32])


def test_max_len_spans_several_splits():
    lens = [300, 7, 150]
    num_splits, blocks_per_split = choose_splits(len(lens), 1, max(lens), 16)
    assert num_splits > 2 and num_splits * blocks_per_split >= 19
    args = make_case(lens, 4, 1, 32, torch.float32, seed=1, device=DEVICE)
    torch.testing.assert_close(paged_decode_triton(*args), paged_decode_torch(*args),
                               **TOL[torch.float32])


@pytest.mark.parametrize("splits", [(1, 7), (3, 3), (4, 2), (9, 1)],
                         ids=lambda s: f"{s[0]}x{s[1]}")
def test_forced_split_layouts(splits):
    """One program over the whole context, several blocks per split, and splits lying wholly
    past every sequence's end (9 x 1 for 7 blocks): the merge must ignore empty splits."""
    num_splits, blocks_per_split = splits
    args = make_case([100, 3, 40], 4, 2, 32, torch.float32, seed=2, device=DEVICE)
    out = _paged_decode(*args[:5], num_splits, blocks_per_split)
    assert not torch.isnan(out).any()
    torch.testing.assert_close(out, paged_decode_torch(*args), **TOL[torch.float32])


@pytest.mark.parametrize("block_size", [8, 32])
def test_other_block_sizes(block_size):
    args = make_case([block_size + 1, 3 * block_size], 4, 2, 32, torch.float32,
                     block_size=block_size, seed=3, device=DEVICE)
    torch.testing.assert_close(paged_decode_triton(*args), paged_decode_torch(*args),
                               **TOL[torch.float32])


def test_strided_query():
    """q need not be contiguous: the kernel takes its strides."""
    q, *rest = make_case([21, 9], 4, 2, 32, torch.float32, seed=4, device=DEVICE)
    q_strided = q.transpose(1, 2).contiguous().transpose(1, 2)
    assert not q_strided.is_contiguous()
    torch.testing.assert_close(paged_decode_triton(q_strided, *rest),
                               paged_decode_torch(q, *rest), **TOL[torch.float32])


def test_choose_splits_rule():
    for batch, kv_heads, max_len in [(1, 1, 1), (1, 8, 4096), (4, 2, 200), (64, 8, 100),
                                     (256, 8, 2048), (1, 1, 100_000)]:
        num_splits, per_split = choose_splits(batch, kv_heads, max_len, 16)
        blocks = -(-max_len // 16)
        assert choose_splits(batch, kv_heads, max_len, 16) == (num_splits, per_split)
        assert 1 <= num_splits <= MAX_SPLITS
        assert (num_splits - 1) * per_split < blocks <= num_splits * per_split  # none empty
    assert choose_splits(1, 1, 1, 16) == (1, 1)
    assert choose_splits(1, 2, 4096, 16)[0] == MAX_SPLITS  # small batch, long context
    assert choose_splits(256, 8, 4096, 16)[0] == 1  # the batch alone fills the GPU


def test_bfloat16_ragged():
    """bf16 is the engine's CUDA dtype; the kernel loads it as fp32 and stores back in bf16."""
    args = make_case([1, 16, 47, 100], 8, 2, 32, torch.bfloat16, seed=6, device=DEVICE)
    out = paged_decode_triton(*args)
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out, paged_decode_torch(*args), atol=2e-2, rtol=2e-2)


def test_split_kernel_warps():
    assert split_kernel_warps(4, 16, 32) == 4  # tiny preset
    assert split_kernel_warps(4, 16, 128) == 8
    assert split_kernel_warps(8, 16, 128) == 16
    assert split_kernel_warps(32, 32, 128) == 16  # capped


def tiny_config():
    return ModelConfig(name="t", layers=2, hidden=128, heads=4, kv_heads=2, head_dim=32,
                       intermediate=256, vocab=64, context=256, weights="random")


def test_plugs_into_paged_attention():
    """A decode step with a prefill chunk behind it, through PagedAttention: both backends on the
    same cache and batch give the same output."""
    torch.manual_seed(5)
    cfg, block_size, layer = tiny_config(), 16, 1
    cache = PagedKVCache(cfg, 40 * block_size * cfg.kv_bytes_per_token(4), block_size,
                         torch.float32, DEVICE)
    cache.k.normal_()
    cache.v.normal_()
    free = torch.randperm(cache.num_blocks).tolist()
    seqs = []
    for i, computed in enumerate([16, 40, 0, 70]):
        seq = Sequence(id=i, prompt_ids=list(range(computed + 1)), max_new_tokens=4)
        seq.num_computed = computed
        seq.block_table = [free.pop() for _ in range(-(-(computed + 1) // block_size))]
        seqs.append(seq)
    prefill = Sequence(id=9, prompt_ids=list(range(12)), max_new_tokens=4)
    prefill.block_table = [free.pop()]
    inputs = build_batch(seqs, [(prefill, 12)], block_size, DEVICE)
    batch: AttentionBatch = inputs.attention
    assert batch.num_decode == 4 and batch.decode_max_len == 71

    tokens = inputs.input_ids.shape[0]
    q = torch.randn(tokens, cfg.heads, cfg.head_dim, device=DEVICE)
    k = torch.randn(tokens, cfg.kv_heads, cfg.head_dim, device=DEVICE)
    v = torch.randn(tokens, cfg.kv_heads, cfg.head_dim, device=DEVICE)
    outputs = {}
    for backend in ("torch", "triton"):
        attend = PagedAttention(cache, backend)
        attend.batch = batch
        outputs[backend] = attend(layer, q, k, v)
    assert outputs["triton"].shape == (tokens, cfg.heads * cfg.head_dim)
    torch.testing.assert_close(outputs["triton"], outputs["torch"], **TOL[torch.float32])
