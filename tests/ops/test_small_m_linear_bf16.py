"""``qwen_ops::small_m_linear`` on bfloat16 operands (bindings/cpu/small_m_linear_avx512_bf16.cpp and the
portable loop) against the float32 product of the same operands.

Every bfloat16 variant this CPU runs (``_C.small_m_linear_bf16_variants()``: portable, and AVX-512 BF16 where
the CPU has it) over the sizes where a SIMD kernel goes wrong: every tile shape and row remainder (M = 1..18,
around 32 and 64), N odd (tile, 16-column block and thread-split tails), K not a multiple of 32 (the masked
bfloat16 K tail of vdpbf16ps, 32 elements a step). The SIMD variant must be batch invariant bitwise. Mixed
dtypes and unknown variants are refused naming the argument; ``model.layers.linear`` routes bfloat16 decode
products to the kernel exactly where the AVX-512 BF16 variant exists.
"""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from qwen_ops.ops.linear import SMALL_M_MAX_ROWS, small_m_linear, small_m_linear_bf16_simd
from qwen_op_spy import small_m_linear_calls
from tests.tolerances import SMALL_M_LINEAR_BF16, tol

try:
    from qwen_ops import _C
except ImportError:  # pragma: no cover - a pure-Python install (QWEN_OPS_BUILD_EXT=0) has no CPU kernels
    pytest.skip("qwen_ops._C is not built (QWEN_OPS_BUILD_EXT=0)", allow_module_level=True)

VARIANTS = _C.small_m_linear_bf16_variants()
SIMD = [v for v in VARIANTS if v != "portable"]
ROWS = sorted(set(range(1, 19)) | {31, 32, 33, SMALL_M_MAX_ROWS, SMALL_M_MAX_ROWS + 1})
SIZES_MK = [(m, k) for m in ROWS for k in (1, 7, 31, 32, 33, 64, 95)] + [(1, 1027), (5, 1024), (16, 3584), (33, 129)]


def _operands(m, n, k, *, bias, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(m, k, generator=g).bfloat16()
    w = (torch.randn(n, k, generator=g) / k ** 0.5).bfloat16()
    b = torch.randn(n, generator=g).bfloat16() if bias else None
    return x, w, b


def _float32_product(x, w, b):
    return F.linear(x.float(), w.float(), None if b is None else b.float())


def test_variants_listed_and_the_simd_one_follows_the_cpu():
    assert VARIANTS[0] == "portable" and set(VARIANTS) <= {"portable", "avx512_bf16"}
    assert small_m_linear_bf16_simd() == ("avx512_bf16" in VARIANTS)


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("n", [1, 3, 37])
def test_within_one_rounding_of_the_float32_product(variant, n):
    for m, k in SIZES_MK:
        for bias in (False, True):
            x, w, b = _operands(m, n, k, bias=bias, seed=m * 1000 + k)
            got = _C.small_m_linear_isa(x, w, b, variant)
            assert got.shape == (m, n) and got.dtype == torch.bfloat16
            torch.testing.assert_close(got.float(), _float32_product(x, w, b),
                                       **tol(SMALL_M_LINEAR_BF16, torch.bfloat16),
                                       msg=lambda s: f"{variant} M={m} N={n} K={k} bias={bias}: {s}")


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("m", [1, 2, 3, 37])
def test_threaded_split_of_many_columns(variant, m):
    x, w, b = _operands(m, 4099, 257, bias=True, seed=7)
    got = _C.small_m_linear_isa(x, w, b, variant)
    torch.testing.assert_close(got.float(), _float32_product(x, w, b), **tol(SMALL_M_LINEAR_BF16, torch.bfloat16))


@pytest.mark.parametrize("variant", SIMD)
def test_rows_do_not_depend_on_the_batch_bitwise(variant):
    for m, n, k in [(65, 37, 130), (33, 50, 128), (7, 19, 1027), (5, 21, 2100)]:
        x, w, b = _operands(m, n, k, bias=True, seed=m)
        whole = _C.small_m_linear_isa(x, w, b, variant)
        for rows in (slice(0, 1), slice(0, 2), slice(3, 6), slice(m - 1, m), slice(1, m)):
            assert torch.equal(_C.small_m_linear_isa(x[rows].contiguous(), w, b, variant), whole[rows]), (m, rows)


def test_operator_is_the_last_variant_bitwise_and_leaves_inputs_alone():
    x, w, b = _operands(4, 301, 1000, bias=True, seed=3)
    copies = [t.clone() for t in (x, w, b)]
    assert torch.equal(torch.ops.qwen_ops.small_m_linear(x, w, b), _C.small_m_linear_isa(x, w, b, VARIANTS[-1]))
    assert torch.equal(small_m_linear(x, w), _C.small_m_linear_isa(x, w, None, VARIANTS[-1]))
    assert all(torch.equal(t, c) for t, c in zip((x, w, b), copies))


def test_rounding_is_to_nearest_even_and_nan_stays_nan():
    # 1 + 2^-8 lies halfway between two bfloat16 values (1 and 1 + 2^-7): nearest even is 1. 1 + 3 * 2^-8
    # is halfway between 1 + 2^-7 and 1 + 2^-6: nearest even is 1 + 2^-6.
    x = torch.tensor([[1.0, 2.0 ** -8]], dtype=torch.bfloat16)
    w = torch.tensor([[1.0, 1.0], [1.0, 3.0]], dtype=torch.bfloat16)
    for variant in VARIANTS:
        got = _C.small_m_linear_isa(x, w, None, variant).float()
        assert got.tolist() == [[1.0, 1.0 + 2.0 ** -6]], variant
        nan = _C.small_m_linear_isa(torch.tensor([[float("nan"), 1.0]], dtype=torch.bfloat16), w, None, variant)
        assert torch.isnan(nan).all(), variant


BAD = {
    "weight float32": (lambda x, w, b: (x, w.float(), b), "argument 'weight' must be bfloat16 \\(x's dtype\\)"),
    "bias float32": (lambda x, w, b: (x, w, b.float()), "argument 'bias' must be bfloat16 \\(x's dtype\\)"),
    "x float16": (lambda x, w, b: (x.half(), w, b), "argument 'x' must be float32 or bfloat16"),
    "K mismatch": (lambda x, w, b: (x, w[:, :-1].contiguous(), b), "argument 'weight' must be \\[N, K\\] with K = 20"),
    "weight strided": (lambda x, w, b: (x, w.repeat(1, 2)[:, ::2], b), "argument 'weight' must be contiguous"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_input_raises_naming_the_argument(case):
    make, message = BAD[case]
    x, w, b = make(*_operands(3, 9, 20, bias=True))
    with pytest.raises(RuntimeError, match=f"small_m_linear.*{message}"):
        torch.ops.qwen_ops.small_m_linear(x, w, b)
    with pytest.raises(RuntimeError, match=f"small_m_linear.*{message}"):
        _C.small_m_linear_isa(x, w, b, "portable")


def test_variant_names_are_checked_per_dtype():
    x, w, _ = _operands(2, 3, 4, bias=False)
    with pytest.raises(RuntimeError, match="argument 'isa' must be 'portable' or 'avx512_bf16' for bfloat16"):
        _C.small_m_linear_isa(x, w, None, "avx512")
    with pytest.raises(RuntimeError, match="argument 'isa' must be one of 'portable', 'avx2', 'avx512'"):
        _C.small_m_linear_isa(x.float(), w.float(), None, "avx512_bf16")
    if "avx512_bf16" not in VARIANTS:
        with pytest.raises(RuntimeError, match="'avx512_bf16', which this CPU"):
            _C.small_m_linear_isa(x, w, None, "avx512_bf16")


def test_fake_takes_bfloat16_and_refuses_mixed_dtypes():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        x, w = torch.empty(3, 20, dtype=torch.bfloat16), torch.empty(9, 20, dtype=torch.bfloat16)
        out = torch.ops.qwen_ops.small_m_linear(x, w, None)
        assert out.shape == (3, 9) and out.dtype == torch.bfloat16
        with pytest.raises(TypeError, match="small_m_linear: argument 'weight' must have dtype in \\(bfloat16\\)"):
            torch.ops.qwen_ops.small_m_linear(x, w.float(), None)


def test_model_linear_routes_bfloat16_where_the_simd_variant_is(monkeypatch):
    from qwen_ops.model.network import layers

    with small_m_linear_calls(monkeypatch, lambda x: x.dtype) as calls:
        x, w, _ = _operands(SMALL_M_MAX_ROWS + 1, 11, 64, bias=False)
        small = layers.linear(x[:4], w)
        assert calls == ([torch.bfloat16] if small_m_linear_bf16_simd() else [])
        torch.testing.assert_close(small.float(), _float32_product(x[:4], w, None),
                                   **tol(SMALL_M_LINEAR_BF16, torch.bfloat16))
        assert torch.equal(layers.linear(x, w), F.linear(x, w))  # prefill-sized: F.linear
        assert len(calls) == len(set(calls)) <= 1
