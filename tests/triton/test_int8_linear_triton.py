"""Triton ``int8_linear`` against the torch reference (under Triton's interpreter on the CPU, tests/conftest.py).

W8A8 bitwise (exact int32 sums and the reference's float32 epilogue in its order; tests/tolerances.py), with
and without quant_bias and bias; weight-only in float32 and bfloat16 at INT8_WEIGHT_ONLY_VS_REFERENCE. Sizes
give more output tiles than the interpreter's 3 programs, partial row / column tiles and a K tail.
"""
from __future__ import annotations

import os
import sys

import pytest
import torch
from tolerances import INT8_WEIGHT_ONLY_VS_REFERENCE, tol

from qwen_ops import ops
from qwen_ops.ops.int8_linear.reference import int8_linear_reference

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "ops"))
from test_int8_linear import operands  # noqa: E402

INTERPRETING = os.environ.get("TRITON_INTERPRET") == "1"
DEVICE = torch.device("cuda" if torch.cuda.is_available() and not INTERPRETING else "cpu")
SIZES = [(1, 5, 7), (3, 70, 130), (17, 33, 64)]


@pytest.mark.parametrize("m,n,k", SIZES)
def test_w8a8_is_bitwise_the_reference(m, n, k):
    x, w, ws, qb, b = (t.to(DEVICE) if t is not None else None for t in operands(m, n, k, seed=m + n + k))
    xq, xs = ops.quantize_per_token(x)
    for quant_bias, bias in ((qb, b), (None, None)):
        out = ops.int8_linear(xq, w, ws, x_scale=xs, quant_bias=quant_bias, bias=bias, backend="triton")
        ref = int8_linear_reference(xq, w, ws, xs, quant_bias, bias)
        assert out.dtype == torch.float32 and torch.equal(out.cpu(), ref.cpu()), (m, n, k)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("m,n,k", SIZES)
def test_weight_only_matches_the_reference(dtype, m, n, k):
    x, w, ws, _, b = (t.to(DEVICE) if t is not None else None for t in operands(m, n, k, seed=2 * m + n + k))
    x = x.to(dtype)
    out = ops.int8_linear(x, w, ws, bias=b, backend="triton")
    assert out.dtype == dtype
    torch.testing.assert_close(out.cpu(), int8_linear_reference(x, w, ws, bias=b).cpu(),
                               **tol(INT8_WEIGHT_ONLY_VS_REFERENCE, dtype))


def test_no_rows():
    w = torch.zeros(4, 8, dtype=torch.int8, device=DEVICE)
    out = ops.int8_linear(torch.zeros(0, 8, device=DEVICE), w, torch.ones(4, device=DEVICE), backend="triton")
    assert out.shape == (0, 4)
