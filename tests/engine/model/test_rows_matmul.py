"""The few-row product (csrc/rows_matmul.cpp, the plan's "cpp" variant) against torch's matmul:
ragged row counts (not a multiple of the register tile's rows), output columns (not a multiple of
four weight rows, nor of a thread's share), and inner lengths (shorter than a vector, not a whole
number of vectors, long enough to be cut into K tiles, with a part vector at the end). The
library's own build takes this machine's widest path; the slow tests build the source by itself
with the flags that select the other paths (AVX2 without AVX-512; the portable loops) and check
those too."""

from __future__ import annotations

import pytest
import torch
from helpers import kernels_required

from engine.model.cpu_kernel import CSRC

ROWS = (1, 2, 3, 4, 5, 7, 8, 9, 13, 16, 17, 33, 64)
# (out, in): K below a vector, a vector and one, odd; 768 (whole); 1025 and 1500 (K tiles and a
# part vector); 3072 (four whole tiles, the small model's down projection).
SHAPES = ((5, 1), (4, 7), (9, 17), (67, 37), (203, 768), (130, 1025), (66, 1500), (68, 3072))


def reference(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    return (x.double() @ weight.double().t()).float()


def check(product, rows=ROWS, shapes=SHAPES) -> None:
    gen = torch.Generator().manual_seed(7)
    for out_features, in_features in shapes:
        weight = torch.randn(out_features, in_features, generator=gen)
        for count in rows:
            x = torch.randn(count, in_features, generator=gen)
            got = product(x, weight)
            assert got.shape == (count, out_features) and got.is_contiguous()
            # float32 sums of in_features products: their rounding grows with the length
            torch.testing.assert_close(got, reference(x, weight), rtol=1e-5,
                                       atol=2e-6 * in_features, msg=f"{count} x {in_features}"
                                       f" by {out_features}")


def test_the_product_at_ragged_rows_columns_and_lengths(cpp_kernel):
    check(torch.ops.engine_cpu.rows_matmul)


def test_an_input_that_is_a_view_and_empty_edges(cpp_kernel):
    product = torch.ops.engine_cpu.rows_matmul
    weight = torch.randn(12, 40)
    x = torch.randn(40, 6).t()  # not contiguous
    torch.testing.assert_close(product(x, weight), reference(x, weight), rtol=1e-5, atol=1e-4)
    assert product(torch.randn(0, 40), weight).shape == (0, 12)
    assert torch.equal(product(torch.randn(3, 0), torch.randn(5, 0)), torch.zeros(3, 5))


def test_bad_input_is_refused_with_a_message(cpp_kernel):
    product = torch.ops.engine_cpu.rows_matmul
    with pytest.raises(RuntimeError, match="weight must be contiguous"):
        product(torch.randn(2, 8), torch.randn(8, 4).t())
    with pytest.raises(RuntimeError, match=r"x \(M, in\) and weight \(out, in\)"):
        product(torch.randn(2, 8), torch.randn(4, 9))
    with pytest.raises(RuntimeError, match="float32 only"):
        product(torch.randn(2, 8, dtype=torch.float64), torch.randn(4, 8, dtype=torch.float64))


def cpu_flags() -> set[str]:
    with open("/proc/cpuinfo") as f:
        return next((set(line.split(":", 1)[1].split()) for line in f
                     if line.startswith("flags")), set())


def test_the_library_takes_this_machines_widest_path(cpp_kernel):
    """The library is built -march=native: AVX-512 where the CPU has it, else AVX2 with FMA."""
    flags = cpu_flags()
    expect = ("avx512" if "avx512f" in flags else
              "avx2" if {"avx2", "fma"} <= flags else "portable")
    assert torch.ops.engine_cpu.rows_matmul_path() == expect


# The flags that select each narrower path on a machine that has the wider ones.
NARROWER = {"avx2": ["-mno-avx512f"], "portable": ["-mno-avx512f", "-mno-avx2", "-mno-fma"]}


@pytest.mark.slow
@pytest.mark.parametrize("path", sorted(NARROWER))
def test_the_narrower_paths_give_the_product_too(path):
    """Other machines of this class lack AVX-512 (or AVX2): their builds take the other paths,
    compiled here by themselves with the flags that select them (a minute each)."""
    from engine.model.cpu_kernel import KernelBuildError, build_alone

    flags = cpu_flags()
    if path == "avx2" and not {"avx2", "fma"} <= flags:
        pytest.skip("this CPU has no AVX2 with FMA to run that path")
    try:
        ops = build_alone((CSRC / "rows_matmul.cpp").read_text(), f"rows_test_{path}",
                          NARROWER[path])
    except KernelBuildError as error:
        if kernels_required():
            pytest.fail(f"the kernel did not build: {error}", pytrace=False)
        pytest.skip(str(error))
    assert ops.rows_matmul_path() == path
    check(ops.rows_matmul)
