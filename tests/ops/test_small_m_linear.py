"""``qwen_ops::small_m_linear`` (bindings/cpu/, the decode-path projections on the CPU) against F.linear.

Every instruction-set variant this CPU runs (portable, AVX2, AVX-512) is called through
``qwen_ops._C.small_m_linear_isa``, over the sizes where a SIMD kernel goes wrong: M = 1..18 and
around 32 and 64 (every tile shape and row remainder, and SMALL_M_MAX_ROWS +- 1), N odd (tile and
16-column block tails, threads splitting 16-column units with a short last one), K not a multiple of
8 or 16 (the masked K tails). The SIMD variants must also be batch invariant bitwise: row m of the result
the same at every M that sums in the same form (the AVX-512 variant sums in its row-lanes form from
``small_m_linear_row_lanes_min_rows()`` rows on). Bad input must raise a clear error naming the argument and
write nothing; the fake must let
torch.compile trace a model-style function; ``model.layers.linear`` must route only small float32
CPU products to the kernel and leave everything else to F.linear unchanged.

Only a build without ``qwen_ops._C`` at all (QWEN_OPS_BUILD_EXT=0) skips this module; an extension
that is built but lacks the kernel fails (test_the_built_extension_has_the_kernel), not skips.
"""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from qwen_ops.ops.linear import SMALL_M_MAX_ROWS, small_m_linear, small_m_linear_available
from qwen_ops.ops.linear.reference import small_m_linear_reference
from qwen_op_spy import small_m_linear_calls
from tests.tolerances import SMALL_M_LINEAR, tol

try:
    from qwen_ops import _C
except ImportError:  # pragma: no cover - a pure-Python install (QWEN_OPS_BUILD_EXT=0) has no CPU kernels
    pytest.skip("qwen_ops._C is not built (QWEN_OPS_BUILD_EXT=0)", allow_module_level=True)

# An extension without the kernel fails here and in test_the_built_extension_has_the_kernel.
ISAS = _C.cpu_isas() if hasattr(_C, "cpu_isas") else ["portable"]
SIMD_ISAS = [isa for isa in ISAS if isa != "portable"]
ROWS = sorted(set(range(1, 19)) | {31, 32, 33, SMALL_M_MAX_ROWS - 1, SMALL_M_MAX_ROWS, SMALL_M_MAX_ROWS + 1, 63, 64, 65})
SIZES_MK = ([(m, k) for m in ROWS for k in (1, 7, 16, 33)]
            + [(1, 1027), (5, 1024), (16, 3584), (17, 515), (32, 128), (33, 129), (64, 130)])


def test_the_built_extension_has_the_kernel():
    assert small_m_linear_available(), "qwen_ops._C is built but torch.ops.qwen_ops has no small_m_linear"
    assert hasattr(_C, "small_m_linear_isa") and hasattr(_C, "cpu_isas"), "qwen_ops._C lacks small_m_linear_isa"


def test_the_kernels_split_their_work_over_torch_threads():
    # at::parallel_for is inline in ATen's headers and spreads the work only in code compiled with OpenMP: a
    # build without -fopenmp ran every CPU kernel on the calling thread, silently (half a 2-core decode step's
    # read rate).
    previous = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        assert _C.parallel_for_threads(2) == 2
        assert _C.parallel_for_threads(1) == 1
    finally:
        torch.set_num_threads(previous)


def _operands(m, n, k, *, bias, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(m, k, generator=g)
    w = torch.randn(n, k, generator=g) / k ** 0.5  # outputs of order 1 at every K
    b = torch.randn(n, generator=g) if bias else None
    return x, w, b


def _float64(x, w, b):
    out = x.double() @ w.double().T
    return (out + b.double() if b is not None else out).float()


def test_every_isa_of_this_cpu_is_listed():
    assert ISAS[0] == "portable"
    assert _C.cpu_best_isa() == ISAS[-1]
    assert set(ISAS) <= {"portable", "avx2", "avx512"}


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("n", [1, 3, 37])
def test_matches_f_linear_and_float64_at_odd_sizes(isa, n):
    for m, k in SIZES_MK:
        for bias in (False, True):
            x, w, b = _operands(m, n, k, bias=bias, seed=m * 1000 + k)
            got = _C.small_m_linear_isa(x, w, b, isa)
            assert got.shape == (m, n) and got.dtype == torch.float32
            torch.testing.assert_close(got, small_m_linear_reference(x, w, b), **tol(SMALL_M_LINEAR, torch.float32),
                                       msg=lambda s: f"isa={isa} M={m} N={n} K={k} bias={bias}: {s}")
            torch.testing.assert_close(got, _float64(x, w, b), **tol(SMALL_M_LINEAR, torch.float32))


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("m", [1, 2, 3, 32, 37])
def test_threaded_split_of_many_columns(isa, m):
    # N large and odd: at::parallel_for splits the 16-column units across threads and the last unit is
    # short; every column must still be written once and right, for every tile shape.
    x, w, b = _operands(m, 4099, 257, bias=True, seed=7)
    got = _C.small_m_linear_isa(x, w, b, isa)
    torch.testing.assert_close(got, F.linear(x, w, b), **tol(SMALL_M_LINEAR, torch.float32))


def _forms(isa: str) -> list[range]:
    """The row counts M whose results sum alike: the AVX-512 variant's dot form below
    ``small_m_linear_row_lanes_min_rows()`` and its row-lanes form from there on; one form elsewhere."""
    if isa != "avx512":
        return [range(1, SMALL_M_MAX_ROWS + 2)]
    lanes_from = _C.small_m_linear_row_lanes_min_rows()
    return [range(1, lanes_from), range(lanes_from, SMALL_M_MAX_ROWS + 2)]


def test_the_row_lanes_form_starts_where_the_dot_form_is_no_longer_faster():
    # The bound is measured (bench/RESULTS.md, "The projection kernel"); it must leave M = 1 (the decode of one
    # request, memory-bound) and M = 2 on the dot form and take M = 16 (16 parallel requests).
    assert 2 < _C.small_m_linear_row_lanes_min_rows() <= 16


@pytest.mark.parametrize("isa", SIMD_ISAS)
def test_rows_do_not_depend_on_the_batch_bitwise(isa):
    # Within a form each output is summed in one fixed order whatever the tile shape (the dot form: M = 1, 2,
    # >= 3 and the row remainders, and at M = 1 weight rows read one at a time up to 4 KB, 8 at a time past
    # it; the row-lanes form: any row group and lane), so a request's logits do not change with the batch
    # it is decoded in as long as the batch stays on the same side of the forms' bound.
    for m, n, k in [(65, 37, 130), (33, 50, 128), (7, 19, 1027), (5, 21, 2100), (20, 23, 1027)]:
        x, w, b = _operands(m, n, k, bias=True, seed=m)
        for form in _forms(isa):
            top = min(m, form[-1])
            if top < form[0]:
                continue
            whole = _C.small_m_linear_isa(x[:top].contiguous(), w, b, isa)
            for start, end in [(0, 1), (0, 2), (3, 6), (top - 1, top), (1, top), (0, form[0]), (2, 2 + form[0])]:
                if end > top or end - start not in form:
                    continue
                got = _C.small_m_linear_isa(x[start:end].contiguous(), w, b, isa)
                assert torch.equal(got, whole[start:end]), (isa, m, top, start, end)


def test_operator_is_the_best_isa_bitwise():
    x, w, b = _operands(4, 301, 1000, bias=True, seed=3)
    assert torch.equal(torch.ops.qwen_ops.small_m_linear(x, w, b), _C.small_m_linear_isa(x, w, b, _C.cpu_best_isa()))
    assert torch.equal(small_m_linear(x, w), _C.small_m_linear_isa(x, w, None, _C.cpu_best_isa()))


def test_empty_sizes():
    assert small_m_linear(torch.zeros(0, 8), torch.zeros(5, 8)).shape == (0, 5)
    assert small_m_linear(torch.zeros(2, 8), torch.zeros(0, 8)).shape == (2, 0)
    b = torch.arange(3.0)
    assert torch.equal(small_m_linear(torch.zeros(2, 0), torch.zeros(3, 0), b), b.expand(2, 3))
    # K = 0 in the row-lanes form too (the packed x is empty; every output is its bias)
    assert torch.equal(small_m_linear(torch.zeros(12, 0), torch.zeros(3, 0), b), b.expand(12, 3))


@pytest.mark.parametrize("m", [5, 12])  # 12: the AVX-512 variant's row-lanes form, which packs x into its own copy
def test_inputs_are_not_modified(m):
    x, w, b = _operands(m, 33, 70, bias=True)
    copies = [t.clone() for t in (x, w, b)]
    for isa in ISAS:
        _C.small_m_linear_isa(x, w, b, isa)
    assert all(torch.equal(t, c) for t, c in zip((x, w, b), copies))


BAD = {
    "x float64": (lambda x, w, b: (x.double(), w, b), "argument 'x' must be float32"),
    "weight bfloat16": (lambda x, w, b: (x, w.bfloat16(), b), "argument 'weight' must be float32"),
    "bias float16": (lambda x, w, b: (x, w, b.half()), "argument 'bias' must be float32"),
    "x 1-D": (lambda x, w, b: (x[0], w, b), "argument 'x' must be 2-D [M, K]"),
    "x 3-D": (lambda x, w, b: (x[None], w, b), "argument 'x' must be 2-D [M, K]"),
    "weight 1-D": (lambda x, w, b: (x, w[0], b), "argument 'weight' must be 2-D [N, K]"),
    "K mismatch": (lambda x, w, b: (x, w[:, :-1].contiguous(), b), "argument 'weight' must be [N, K] with K = 20"),
    "bias length": (lambda x, w, b: (x, w, b[:-1]), "argument 'bias' must be [N] = [9]"),
    "bias 2-D": (lambda x, w, b: (x, w, b[None]), "argument 'bias' must be [N] = [9]"),
    "x transposed": (lambda x, w, b: (torch.randn(20, 3).T, w, b), "argument 'x' must be contiguous"),
    "weight strided": (lambda x, w, b: (x, torch.randn(9, 40)[:, ::2], b), "argument 'weight' must be contiguous"),
    "bias strided": (lambda x, w, b: (x, w, torch.randn(18)[::2]), "argument 'bias' must be contiguous"),
    "x on meta": (lambda x, w, b: (x.to("meta"), w, b), "argument 'x' must be a CPU tensor"),
    "weight on meta": (lambda x, w, b: (x, w.to("meta"), b), "argument 'weight' must be a CPU tensor"),
}


@pytest.mark.parametrize("m", [3, SMALL_M_MAX_ROWS + 7])
@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_input_raises_naming_the_argument(case, m):
    make, message = BAD[case]
    x, w, b = make(*_operands(m, 9, 20, bias=True))
    for isa in ISAS:
        with pytest.raises(RuntimeError, match=f"small_m_linear.*{message.replace('[', '.').replace(']', '.')}"):
            _C.small_m_linear_isa(x, w, b, isa)
    if "meta" not in case:  # on meta tensors the operator runs its fake, which checks shapes only
        with pytest.raises((RuntimeError, ValueError), match="small_m_linear"):
            torch.ops.qwen_ops.small_m_linear(x, w, b)


def test_unknown_isa_is_refused():
    x, w, _ = _operands(2, 3, 4, bias=False)
    with pytest.raises(RuntimeError, match="argument 'isa' must be one of 'portable', 'avx2', 'avx512'"):
        _C.small_m_linear_isa(x, w, None, "sse9")


def test_fake_checks_shapes_and_gives_the_output_shape():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        x, w = torch.empty(3, 20), torch.empty(9, 20)
        assert torch.ops.qwen_ops.small_m_linear(x, w, None).shape == (3, 9)
        with pytest.raises(ValueError, match="small_m_linear: argument 'weight'"):
            torch.ops.qwen_ops.small_m_linear(x, torch.empty(9, 21), None)


def test_model_linear_is_traceable_by_torch_compile():
    from qwen_ops.model.network.layers import linear

    x, w, b = _operands(2, 37, 33, bias=True)
    w2 = torch.randn(5, 37)

    def two_projections(x):
        return linear(F.silu(linear(x, w, b)), w2)

    compiled = torch.compile(two_projections, fullgraph=True, backend="aot_eager")
    assert torch.equal(compiled(x), two_projections(x))


def test_model_linear_routes_small_float32_cpu_products_only(monkeypatch):
    from qwen_ops.model.network import layers

    with small_m_linear_calls(monkeypatch, lambda x: x.shape) as calls:
        x, w, b = _operands(SMALL_M_MAX_ROWS + 1, 11, 24, bias=True)
        small = layers.linear(x[:SMALL_M_MAX_ROWS], w, b)
        assert calls == [(SMALL_M_MAX_ROWS, 24)]
        torch.testing.assert_close(small, F.linear(x[:SMALL_M_MAX_ROWS], w, b), **tol(SMALL_M_LINEAR, torch.float32))
        # Prefill-sized, another dtype, a strided weight, a 3-D x: F.linear, bitwise.
        assert torch.equal(layers.linear(x, w, b), F.linear(x, w, b))
        assert torch.equal(layers.linear(x[:2].double(), w.double()), F.linear(x[:2].double(), w.double()))
        wt = torch.randn(24, 11).T
        assert torch.equal(layers.linear(x[:2], wt), F.linear(x[:2], wt))
        assert torch.equal(layers.linear(x[None, :2], w), F.linear(x[None, :2], w))
        assert len(calls) == 1
        layers.set_small_m_linear(False)
        assert torch.equal(layers.linear(x[:2], w, b), F.linear(x[:2], w, b)) and len(calls) == 1
