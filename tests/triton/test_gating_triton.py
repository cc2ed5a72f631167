"""Triton ``fused_gdn_gating`` against the torch reference.

Compared through the public op (``backend="triton"`` vs ``backend="torch"``)
under Triton's interpreter on the CPU (``tests/conftest.py``). Edge cases:
token counts that are not a multiple of the 64-token tile and more tiles than
programs (the persistent loop runs several times), a head count that is not a
power of two (masked head columns), softplus inputs on both sides of its
threshold of 20 and far below zero, strided a/b (views of one projection),
and non-finite inputs (NaN and +-inf must come out as torch's do).
"""
from __future__ import annotations

import os

import pytest
import torch
from tolerances import KERNEL_VS_REFERENCE, tol

from qwen_ops import ops
from qwen_ops.testing import Draw, gating_inputs

DEVICE = torch.device("cuda" if torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1" else "cpu")
F32 = torch.float32


def run_both(A_log, a, b, dt_bias, device=DEVICE):
    results = []
    for backend in ("torch", "triton"):
        args = [x.to(device) for x in (A_log, a, b, dt_bias)]
        g, beta = ops.fused_gdn_gating(*args, backend=backend)
        results.append((g.cpu(), beta.cpu()))
    return results


def assert_matches(results, b_dtype):
    (ref_g, ref_beta), (tri_g, tri_beta) = results
    assert tri_g.dtype == F32 and tri_g.shape == ref_g.shape
    assert tri_beta.dtype == b_dtype and tri_beta.shape == ref_beta.shape
    # g is float32 whatever a's dtype: exp, log and a product in float32.
    torch.testing.assert_close(tri_g, ref_g, **tol(KERNEL_VS_REFERENCE, F32))
    torch.testing.assert_close(tri_beta, ref_beta, **tol(KERNEL_VS_REFERENCE, b_dtype))


def draw(gen, tokens, heads, dtype):
    # a spans roughly [-60, 60]: softplus on both sides of the threshold 20 and deep in exp underflow.
    call = gating_inputs(Draw(gen), tokens, heads, dtype, a_scale=20.0, b_scale=4.0, dt_bias_dtype=dtype)
    return call["A_log"], call["a"], call["b"], call["dt_bias"]


@pytest.mark.parametrize("dtype", [F32, torch.float16])
def test_matches_reference(gen, dtype):
    """150 tokens: three 64-token tiles (the last partial) over 3 programs; 6 heads pad to 8."""
    A_log, a, b, dt_bias = draw(gen, 150, 6, dtype)
    a[0, :3] = torch.tensor([20.0, 19.99, -100.0]).to(dtype)  # at, just under the threshold, underflow
    assert_matches(run_both(A_log, a, b, dt_bias), dtype)


def test_strided_projections(gen):
    """a and b as column slices of one [T, 2 Hv + 8] projection, float16 with float32 A_log and dt_bias."""
    tokens, heads = 70, 4
    proj = (torch.randn(tokens, 2 * heads + 8, generator=gen) * 10).to(torch.float16)
    a, b = proj[:, 8:8 + heads], proj[:, 8 + heads:]
    assert not a.is_contiguous()
    A_log, dt_bias = torch.randn(heads, generator=gen), torch.randn(heads, generator=gen)
    assert_matches(run_both(A_log, a, b, dt_bias), torch.float16)


def test_no_tokens():
    """T = 0 (an empty batch): empty outputs of the right shape and dtypes, no launch."""
    A_log, dt_bias = torch.zeros(4), torch.zeros(4)
    a, b = torch.empty(0, 4), torch.empty(0, 4, dtype=torch.float16)
    g, beta = ops.fused_gdn_gating(A_log.to(DEVICE), a.to(DEVICE), b.to(DEVICE), dt_bias.to(DEVICE), backend="triton")
    assert g.shape == (0, 4) and g.dtype == F32 and beta.shape == (0, 4) and beta.dtype == torch.float16


def test_bf16(gen):
    """bf16 (no tl.dot here, so it also runs under the interpreter):
    bfloat16 projections with Qwen3.5's 32 value heads and 1000 tokens."""
    A_log, a, b, dt_bias = draw(gen, 1000, 32, torch.bfloat16)
    assert_matches(run_both(A_log, a, b, dt_bias), torch.bfloat16)


def test_nan_and_inf_propagate_like_torch(gen):
    """NaN and +-inf in a, dt_bias and b give torch's results, not finite stand-ins.

    softplus(NaN) is NaN (the threshold test and the clamped exp must not pick
    a finite branch), softplus(+inf) = +inf so g = -inf, softplus(-inf) = 0 so
    g = -0; sigmoid(NaN) = NaN, sigmoid(+-inf) = 1 / 0. Heads 0-3 carry the
    special values in a, head 4 a NaN dt_bias; random finite values elsewhere.
    """
    nan, inf = float("nan"), float("inf")
    A_log, a, b, dt_bias = draw(gen, 5, 6, F32)
    a[0, :4] = torch.tensor([nan, inf, -inf, 25.0])
    a[1, :4] = torch.tensor([-inf, nan, 25.0, inf])
    dt_bias[4] = nan
    b[0, :3] = torch.tensor([nan, inf, -inf])
    results = run_both(A_log, a, b, dt_bias)
    (ref_g, ref_beta), (tri_g, tri_beta) = results
    torch.testing.assert_close(tri_g, ref_g, equal_nan=True, **tol(KERNEL_VS_REFERENCE, F32))
    torch.testing.assert_close(tri_beta, ref_beta, equal_nan=True, **tol(KERNEL_VS_REFERENCE, F32))
    # The premise, independent of the reference: the special values really are special.
    assert tri_g[0, 0].isnan() and tri_g[1, 1].isnan() and tri_g[:, 4].isnan().all()
    assert tri_g[0, 1] == -inf and tri_g[1, 3] == -inf
    assert tri_g[0, 2] == 0 and tri_g[1, 0] == 0
    assert torch.isfinite(tri_g[0, 3]) and torch.isfinite(tri_g[:, 5]).all()
    assert tri_beta[0, 0].isnan() and tri_beta[0, 1] == 1 and tri_beta[0, 2] == 0
