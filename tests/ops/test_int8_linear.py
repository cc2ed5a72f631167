"""``int8_linear`` (ops/int8_linear): the reference's meaning, the C++ variants, the op, bad input, tracing.

W8A8 outputs are compared bitwise (tests/tolerances.py INT8_WEIGHT_ONLY_VS_REFERENCE says why there is no
tolerance): every variant this CPU runs (``qwen_ops._C.int8_linear_variants()``: portable, and AVX-512 VNNI
where the CPU has it) over the sizes where a SIMD kernel goes wrong: M = 1..9 and 17 (tiles of 4 rows of x and
their remainders), N not a multiple of 4 or 16 (short tiles, thread units), K around 64 (the masked K tail).
Weight-only with bfloat16 x runs the same sizes on every kernel ``weight_only_int8_linear_bf16_variants()``
names. The Triton kernel has its own file (tests/triton/test_int8_linear_triton.py).
"""
from __future__ import annotations

import pytest
import torch

from qwen_ops.ops import int8_linear, quantize_per_token, quantize_static
from qwen_ops.ops.int8_linear import MAX_K
from qwen_ops.ops.int8_linear.reference import dequantize_weight, int8_linear_reference
from tests.tolerances import INT8_WEIGHT_ONLY_VS_REFERENCE, tol

try:
    from qwen_ops import _C
except ImportError:  # pragma: no cover - a pure-Python install has no CPU kernels; the reference still runs
    _C = None

HAS_KERNELS = _C is not None and hasattr(_C, "int8_linear_variants")
VARIANTS = _C.int8_linear_variants() if HAS_KERNELS else []
# Weight-only with bfloat16 x: the float32 kernels (x widened) and the AVX-512 BF16 one where the CPU has it.
BF16_VARIANTS = _C.weight_only_int8_linear_bf16_variants() if HAS_KERNELS else []
needs_kernels = pytest.mark.skipif(not HAS_KERNELS, reason="qwen_ops._C is not built (QWEN_OPS_BUILD_EXT=0)")
SIZES = ([(m, n, k) for m in (1, 2, 3, 4, 5, 7, 9, 17) for n, k in ((1, 1), (5, 7), (17, 64), (33, 65))]
         + [(1, 3, 1027), (6, 40, 130), (64, 16, 63), (2, 1, 4096)])


def operands(m, n, k, *, seed=0, bias=True):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(m, k, generator=g)
    w = torch.randint(-127, 128, (n, k), generator=g, dtype=torch.int8)
    ws = (torch.rand(n, generator=g) + 0.5) / (127 * k ** 0.5)  # outputs of order 1
    qb = torch.randint(-5000, 5000, (n,), generator=g, dtype=torch.int32)
    b = torch.randn(n, generator=g) if bias else None
    return x, w, ws, qb, b


def test_the_built_extension_has_the_kernels():
    if _C is None:
        pytest.skip("qwen_ops._C is not built (QWEN_OPS_BUILD_EXT=0)")
    assert HAS_KERNELS, "qwen_ops._C is built but lacks the int8_linear kernels"
    assert VARIANTS[0] == "portable" and set(VARIANTS) <= {"portable", "avx512_vnni"}


def test_reference_means_the_dequantized_product():
    """W8A8: the reference equals float64 (x_q * x_scale) @ (w_q * w_scale)^T + quant_bias's share, to float32."""
    x, w, ws, qb, b = operands(5, 33, 130)
    xq, xs = quantize_per_token(x)
    ref = int8_linear_reference(xq, w, ws, xs, qb, b)
    exact = ((xq.double() @ w.double().T + qb.double()) * xs.double()[:, None] * ws.double() + b.double())
    torch.testing.assert_close(ref.double(), exact, atol=1e-5, rtol=1e-6)
    # Weight-only: x against the float weight the int8 one stands for.
    ref_wo = int8_linear_reference(x, w, ws, bias=b)
    torch.testing.assert_close(ref_wo.double(), x.double() @ dequantize_weight(w, ws).double().T + b.double(),
                               atol=1e-5, rtol=1e-5)


@needs_kernels
@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("m,n,k", SIZES)
def test_w8a8_kernel_is_bitwise_the_reference(variant, m, n, k):
    x, w, ws, qb, b = operands(m, n, k, seed=m * 1000 + n + k)
    xq, xs = quantize_per_token(x)
    for quant_bias, bias in ((qb, b), (None, None)):
        out = _C.w8a8_linear_cpu(xq, xs, w, ws, quant_bias, bias, variant)
        assert torch.equal(out, int8_linear_reference(xq, w, ws, xs, quant_bias, bias)), (variant, m, n, k)


@needs_kernels
@pytest.mark.parametrize("variant", VARIANTS)
def test_w8a8_kernel_extremes_are_exact(variant):
    """All -128 operands at K = 4096: sums of 2^26 (past float32's 2^24, so the one rounding shows) stay exact."""
    m, n, k = 3, 20, 4096
    xq = torch.full((m, k), -128, dtype=torch.int8)
    w = torch.full((n, k), -128, dtype=torch.int8)
    w[1::2, ::3] = 127
    xs, ws = torch.ones(m), torch.ones(n)
    out = _C.w8a8_linear_cpu(xq, xs, w, ws, None, None, variant)
    assert torch.equal(out, int8_linear_reference(xq, w, ws, xs))
    assert out[0, 0].item() == float(128 * 128 * k)


@needs_kernels
@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("m,n,k", SIZES)
def test_weight_only_kernel_matches_the_reference(variant, m, n, k):
    x, w, ws, _, b = operands(m, n, k, seed=m + n * 7 + k)
    out = _C.weight_only_int8_linear_cpu(x, w, ws, b, variant)
    torch.testing.assert_close(out, int8_linear_reference(x, w, ws, bias=b), **tol(INT8_WEIGHT_ONLY_VS_REFERENCE,
                                                                                    torch.float32))


def assert_rows_do_not_depend_on_the_batch(x, w, ws, b, variant):
    """Rows of x alone, in pairs and last give the bits they have in the whole batch."""
    whole = _C.weight_only_int8_linear_cpu(x, w, ws, b, variant)
    m = x.shape[0]
    for rows in (slice(0, 1), slice(2, 3), slice(1, 3), slice(m - 1, m)):
        assert torch.equal(_C.weight_only_int8_linear_cpu(x[rows].contiguous(), w, ws, b, variant), whole[rows])


@needs_kernels
@pytest.mark.parametrize("variant", VARIANTS)
def test_weight_only_rows_do_not_depend_on_the_batch_bitwise(variant):
    # One row of x runs tiles of one row from each of 4 parts of the columns (n = 3: no parts, one row at a
    # time), several rows tiles of 4 neighbouring columns; each output is still summed in one order (k
    # ascending, 16 at a time, the tail last), so a request's logits do not move with its batch.
    for m, n, k in [(9, 37, 130), (5, 19, 1027), (3, 8, 64), (4, 3, 20)]:
        x, w, ws, _, b = operands(m, n, k, seed=m)
        assert_rows_do_not_depend_on_the_batch(x, w, ws, b, variant)


@needs_kernels
@pytest.mark.parametrize("variant", BF16_VARIANTS)
@pytest.mark.parametrize("m,n,k", SIZES)
def test_weight_only_bfloat16_kernels_match_the_reference(variant, m, n, k):
    """bfloat16 x: float32 sums rounded once, so each output is the reference's or, where the sums' order moves
    the float32 value across a rounding boundary, one bfloat16 step from it."""
    x, w, ws, _, b = operands(m, n, k, seed=3 * m + n + k)
    x = x.to(torch.bfloat16)
    for bias in (b, None):
        out = _C.weight_only_int8_linear_cpu(x, w, ws, bias, variant)
        ref = int8_linear_reference(x, w, ws, bias=bias)
        assert out.dtype == torch.bfloat16 and out.shape == (m, n)
        exact = (x.double() @ w.double().T) * ws.double() + (0 if bias is None else bias.double())
        step = torch.finfo(torch.bfloat16).eps * exact.abs().clamp_min(1e-30)
        # Within one bfloat16 step of the exact product (the rounding plus float32 sums), as the reference is.
        assert ((out.double() - exact).abs() <= step).all(), (variant, m, n, k)
        assert (out == ref).float().mean() >= 0.9, (variant, m, n, k)


@needs_kernels
@pytest.mark.parametrize("variant", BF16_VARIANTS)
def test_weight_only_bfloat16_rows_do_not_depend_on_the_batch_bitwise(variant):
    # The AVX-512 BF16 kernel widens the weight in registers at M = 1 and into a block buffer past it; both sum
    # each output in one order (pairs of k, 32 at a time, the tail last). The outputs are bfloat16, which hides
    # most float32 differences of order, so x makes the order show: +2^20 at the even k of the first 32 and
    # -2^20 at those of the next 32, against weights of 127 there. Each lane's sum passes through 127 * 2^20
    # (a float32 step of 16) and back, and what the smaller products lose on the way depends on when they
    # come: two accumulators taking alternate steps moved outputs by more than a bfloat16 step (checked).
    for m, n, k in [(9, 37, 130), (5, 19, 1027), (3, 8, 64), (4, 3, 70), (6, 9, 4096)]:
        x, w, ws, _, b = operands(m, n, k, seed=m)
        x[:, 0:32:2], x[:, 32:64:2], w[:, 0:64:2] = 2.0 ** 20, -(2.0 ** 20), 127
        x = x.to(torch.bfloat16)
        assert_rows_do_not_depend_on_the_batch(x, w, ws, b, variant)


@needs_kernels
def test_weight_only_kernel_names_are_checked_against_x():
    x, w, ws, _, b = operands(2, 8, 32)
    with pytest.raises(RuntimeError, match="'avx512_bf16', a kernel for bfloat16 x; x is float32"):
        _C.weight_only_int8_linear_cpu(x, w, ws, b, "avx512_bf16")
    with pytest.raises(RuntimeError, match="argument 'x' must be float32 or bfloat16, got Half"):
        _C.weight_only_int8_linear_cpu(x.half(), w, ws, b)
    assert BF16_VARIANTS[: len(VARIANTS)] == VARIANTS


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_op_weight_only_in_the_activation_dtype(dtype):
    x, w, ws, _, b = operands(4, 24, 96)
    x = x.to(dtype)
    out = int8_linear(x, w, ws, bias=b)
    assert out.dtype == dtype and out.shape == (4, 24)
    torch.testing.assert_close(out, int8_linear_reference(x, w, ws, bias=b), **tol(INT8_WEIGHT_ONLY_VS_REFERENCE, dtype))


def test_op_w8a8_static_and_dynamic():
    x, w, ws, qb, b = operands(6, 24, 96)
    xq, xs = quantize_per_token(x)
    assert torch.equal(int8_linear(xq, w, ws, x_scale=xs, bias=b),
                       int8_linear_reference(xq, w, ws, xs, None, b))
    q = quantize_static(x, torch.tensor([0.02]), torch.tensor([3.0]))
    ones = torch.ones(6)
    out = int8_linear(q, w, ws, x_scale=ones, quant_bias=qb, out_dtype=torch.bfloat16)
    assert out.dtype == torch.bfloat16
    assert torch.equal(out, int8_linear_reference(q, w, ws, ones, qb, None, torch.bfloat16))
    # Strided int8 weight (a column slice): same answer as its contiguous copy.
    wide = torch.cat([w, w], dim=1)[:, :96]
    assert torch.equal(int8_linear(xq, wide, ws, x_scale=xs), int8_linear(xq, w, ws, x_scale=xs))


def test_quantize_per_token():
    x = torch.randn(5, 40) * torch.tensor([1.0, 10.0, 0.01, 3.0, 0.0])[:, None]
    q, s = quantize_per_token(x)
    assert q.dtype == torch.int8 and s.dtype == torch.float32
    assert torch.equal(s[4], torch.tensor(1.0)) and not q[4].any()  # an all-zero row: zeros, scale 1
    assert (q[:4].abs().amax(dim=1) == 127).all()
    assert ((q.float() * s[:, None] - x).abs() <= s[:, None] / 2 * (1 + 1e-6)).all()


def test_quantize_static_rounds_and_clamps():
    x = torch.tensor([[0.0, 0.5, -0.5, 1e3, -1e3, 0.875, 1.125]])
    q = quantize_static(x, torch.tensor([0.25]), torch.tensor([-3.0]))
    # 0.875 / 0.25 - 3 = 0.5 and 1.125 / 0.25 - 3 = 1.5 round half to even: 0 and 2.
    assert q.tolist() == [[-3, -1, -5, 127, -128, 0, 2]]


@pytest.mark.parametrize("case,error,words", [
    ("float weight", TypeError, "'weight'"),
    ("no x_scale", ValueError, "'x_scale'"),
    ("x_scale for float x", ValueError, "'x_scale'"),
    ("wrong K", ValueError, "'weight'"),
    ("scale shape", ValueError, "'weight_scale'"),
    ("quant_bias dtype", TypeError, "'quant_bias'"),
    ("K too large", ValueError, f"K <= {MAX_K}"),
])
def test_bad_input_names_the_argument(case, error, words):
    x, w, ws, qb, _ = operands(2, 8, 16)
    xq, xs = quantize_per_token(x)
    calls = {
        "float weight": lambda: int8_linear(x, w.float(), ws),
        "no x_scale": lambda: int8_linear(xq, w, ws),
        "x_scale for float x": lambda: int8_linear(x, w, ws, x_scale=xs),
        "wrong K": lambda: int8_linear(x[:, :15], w, ws),
        "scale shape": lambda: int8_linear(x, w, ws[:7]),
        "quant_bias dtype": lambda: int8_linear(xq, w, ws, x_scale=xs, quant_bias=qb.float()),
        "K too large": lambda: int8_linear(torch.zeros(1, MAX_K + 1, dtype=torch.int8), torch.zeros(1, MAX_K + 1,
                                           dtype=torch.int8), torch.ones(1), x_scale=torch.ones(1)),
    }
    with pytest.raises(error, match=words):
        calls[case]()


@needs_kernels
def test_cpp_checks_name_the_argument():
    x, w, ws, qb, _ = operands(2, 8, 16)
    xq, xs = quantize_per_token(x)
    with pytest.raises(RuntimeError, match="'x_scale'"):
        _C.w8a8_linear_cpu(xq, xs[:1], w, ws, None, None)
    with pytest.raises(RuntimeError, match="'weight'"):
        _C.weight_only_int8_linear_cpu(x, w[:, :8].contiguous(), ws, None)
    with pytest.raises(RuntimeError, match="'quant_bias'"):
        _C.w8a8_linear_cpu(xq, xs, w, ws, qb[:3], None)
    with pytest.raises(RuntimeError, match="'variant'"):
        _C.w8a8_linear_cpu(xq, xs, w, ws, None, None, "avx9")


def test_torch_compile_traces_the_op():
    x, w, ws, qb, b = operands(3, 16, 32)

    def projection(x):
        q, s = quantize_per_token(x)
        return int8_linear(q, w, ws, x_scale=s, bias=b) + int8_linear(x, w, ws)

    compiled = torch.compile(projection, fullgraph=True, backend="eager")
    torch.testing.assert_close(compiled(x), projection(x), atol=0, rtol=0)


@needs_kernels
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_model_calls_the_weight_only_kernel_as_a_cpp_operator(monkeypatch, dtype):
    """``int8_projection`` sends float32 and bfloat16 CPU rows straight to
    ``torch.ops.qwen_ops.weight_only_int8_linear``: the torch backend's kernel (bfloat16 widened to float32, the
    result rounded once), so the same bits as ``int8_linear``, without its Python custom op."""
    from qwen_ops.model.loading.quantization import Int8Weight
    from qwen_ops.model.network import layers
    from qwen_ops.ops.int8_linear.op import weight_only_cpu_op_available
    from qwen_op_spy import qwen_op_calls

    assert weight_only_cpu_op_available()
    x, w, ws, _, b = operands(3, 40, 96, seed=11)
    x = x.to(dtype)
    weight = Int8Weight(weight=w, weight_scale=ws, scheme="W8A16")
    with qwen_op_calls(monkeypatch, "weight_only_int8_linear", lambda args: args[0].shape) as calls:
        got = layers.int8_projection(x, weight, b)
    assert calls == [x.shape]
    assert got.dtype == dtype
    assert torch.equal(got, int8_linear(x, w, ws, bias=b))
    compiled = torch.compile(lambda a: layers.int8_projection(a, weight, b), backend="eager", fullgraph=True)
    assert torch.equal(compiled(x), got)
    with pytest.raises(RuntimeError, match="argument 'weight_scale' must be \\[N\\] = \\[40\\]"):
        torch.ops.qwen_ops.weight_only_int8_linear(x, w, ws[:-1], b)
