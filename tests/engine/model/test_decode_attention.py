"""CPU decode attention: the torch backend's length groups and the C++ kernel, against the padded
reference (paged_decode_torch), on shuffled block tables, block edges, grouped-query heads, length
1 and one long context beside short ones."""

from __future__ import annotations

import pytest
import torch

from engine.model.attention import (
    GROUP_RATIO,
    GROUP_SLACK,
    group_rows,
    make_groups,
    paged_decode_grouped,
    paged_decode_torch,
)
from engine.model.layers import Rotary
from tests.engine.model.paged_cases import CASES, make_case, poisoned

TOL = dict(atol=1e-5, rtol=1e-5)


def grouped(q, k_cache, v_cache, tables, seq_lens, max_len):
    groups = make_groups(seq_lens.tolist(), tables.long(), k_cache.shape[1])
    return paged_decode_grouped(q, k_cache, v_cache, groups)


@pytest.fixture(scope="module")
def kernel(cpp_kernel):
    return lambda q, k, v, tables, lens, _max_len: cpp_kernel(q, k, v, tables.long(), lens)


@pytest.mark.parametrize("case", list(CASES.values()), ids=list(CASES))
def test_length_groups_match_reference(case):
    args = make_case(*case, torch.float32)
    torch.testing.assert_close(grouped(*args), paged_decode_torch(*args), **TOL)


@pytest.mark.parametrize("case", list(CASES.values()), ids=list(CASES))
def test_cpp_kernel_matches_reference(kernel, case):
    args = make_case(*case, torch.float32)
    torch.testing.assert_close(kernel(*args), paged_decode_torch(*args), **TOL)


def test_cpp_kernel_reads_each_sequence_only_to_its_own_length(kernel):
    """NaN past every sequence's length (block-table padding, the tail of its last block) must
    not reach the output: the kernel reads each sequence's own blocks in place, no further."""
    case = make_case([300, 7, 20, 9, 16], 12, 4, 64, torch.float32, seed=7)
    out = kernel(*poisoned(case))
    assert not torch.isnan(out).any()
    torch.testing.assert_close(out, paged_decode_torch(*case), **TOL)


def test_cpp_kernel_takes_strided_queries(kernel):
    """The runner hands it q as a slice of the projected q and k heads (not contiguous)."""
    q, *rest = make_case([21, 9], 4, 2, 32, torch.float32, seed=4)
    q_strided = torch.cat([q, torch.zeros_like(q)], dim=1)[:, :4]
    assert not q_strided.is_contiguous()
    torch.testing.assert_close(kernel(q_strided, *rest), paged_decode_torch(q, *rest), **TOL)


@pytest.mark.parametrize("heads, kv_heads, head_dim", [(8, 2, 32), (12, 4, 64)])
def test_cpp_decode_step_rotates_writes_and_attends(cpp_kernel, heads, kv_heads, head_dim):
    """The one-call decode step (rotary on q and k, k and v written at each row's slot, then
    attention) equals the same done by torch ops: Rotary.apply, index_copy_, the padded
    reference. Each row is a sequence's new last token, at the end of a shuffled block table."""
    from engine.model.cpu_kernel import decode_step_kernel

    lens = [37, 1, 16, 17, 300]
    _, k_cache, v_cache, tables, seq_lens, max_len = make_case(lens, heads, kv_heads, head_dim,
                                                               torch.float32, seed=3)
    tables = tables.long()
    block_size = k_cache.shape[1]
    positions = torch.tensor([n - 1 for n in lens])
    slots = torch.stack([tables[row, pos // block_size] * block_size + pos % block_size
                         for row, pos in enumerate(positions.tolist())])
    qkv = torch.randn(len(lens), (heads + 2 * kv_heads) * head_dim,
                      generator=torch.Generator().manual_seed(9))
    angles = Rotary(head_dim, 4096, 10000.0).angles(positions, torch.float32)

    q, k, v = qkv.view(len(lens), heads + 2 * kv_heads, head_dim).split(
        [heads, kv_heads, kv_heads], dim=1)
    k_ref, v_ref = k_cache.clone(), v_cache.clone()
    k_ref.view(-1, kv_heads, head_dim).index_copy_(0, slots, Rotary.apply(k, angles))
    v_ref.view(-1, kv_heads, head_dim).index_copy_(0, slots, v)
    expected = paged_decode_torch(Rotary.apply(q, angles), k_ref, v_ref, tables, seq_lens,
                                  max_len)

    out = decode_step_kernel()(qkv, *angles, slots, k_cache, v_cache, tables, seq_lens, heads)
    torch.testing.assert_close(k_cache, k_ref, **TOL)
    assert torch.equal(v_cache, v_ref)
    torch.testing.assert_close(out, expected.reshape(len(lens), -1), **TOL)


def padded_positions(lens: list[int], groups: list[list[int]]) -> int:
    return sum(len(rows) * lens[rows[0]] for rows in groups)


@pytest.mark.parametrize("lens", [
    [128] * 8 + [2048],  # the mixed step: one long prompt beside short ones
    [2048, 1000, 500, 250, 125, 60, 30, 15, 7, 3, 1],
    [1] * 5 + [300] * 3,
    list(range(1, 200, 7)),
])
def test_length_groups_pad_within_the_bound(lens):
    """Every row in exactly one group, longest first; the padded work stays within
    GROUP_RATIO x the real work plus GROUP_SLACK per row: the cost follows the sum of lengths."""
    groups = group_rows(lens)
    assert sorted(row for rows in groups for row in rows) == list(range(len(lens)))
    for rows in groups:
        assert [lens[r] for r in rows] == sorted((lens[r] for r in rows), reverse=True)
    assert padded_positions(lens, groups) <= GROUP_RATIO * sum(lens) + GROUP_SLACK * len(lens)


def test_equal_lengths_make_one_group_and_a_long_prompt_its_own():
    assert len(group_rows([160] * 64)) == 1
    groups = group_rows([128] * 4 + [2048] + [128] * 4)
    assert groups == [[4], [0, 1, 2, 3, 5, 6, 7, 8]]
    assert padded_positions([128] * 4 + [2048] + [128] * 4, groups) == 2048 + 8 * 128
