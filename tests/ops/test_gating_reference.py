"""The torch reference of ``fused_gdn_gating`` against a float64 loop written from the contract."""
from __future__ import annotations

import math

import pytest
import torch
from tolerances import REFERENCE_VS_FLOAT64, tol

from qwen_ops.ops import fused_gdn_gating
from qwen_ops.testing import Draw, gating_inputs

F32 = torch.float32
F64 = torch.float64


def gating_float64(A_log, a, b, dt_bias):
    """Python loop over tokens and heads in float64 (math module); softplus with threshold 20."""
    tokens, heads = a.shape
    g = torch.zeros(tokens, heads, dtype=F64)
    beta = torch.zeros(tokens, heads, dtype=F64)
    for t in range(tokens):
        for h in range(heads):
            x = float(a[t, h]) + float(dt_bias[h])
            softplus = x if x > 20.0 else math.log1p(math.exp(x))
            g[t, h] = -math.exp(float(A_log[h])) * softplus
            beta[t, h] = 1.0 / (1.0 + math.exp(-float(b[t, h])))
    return g, beta


@pytest.mark.parametrize("dtype", [F32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("param_dtype", [F32, torch.bfloat16])
def test_gates_match_float64(gen, dtype, param_dtype):
    tokens, heads = 33, 8
    call = gating_inputs(Draw(gen), tokens, heads, dtype, a_scale=4.0, b_scale=4.0, param_dtype=param_dtype)
    A_log, a, b, dt_bias = call["A_log"], call["a"], call["b"], call["dt_bias"]
    before = [t.clone() for t in (A_log, a, b, dt_bias)]

    g, beta = fused_gdn_gating(A_log, a, b, dt_bias, backend="torch")

    assert g.dtype == F32 and g.shape == (tokens, heads)
    assert beta.dtype == dtype and beta.shape == (tokens, heads)
    want_g, want_beta = gating_float64(A_log, a, b, dt_bias)
    # Inputs are exact in float32, so g is float32 arithmetic whatever their dtype.
    torch.testing.assert_close(g.to(F64), want_g, **tol(REFERENCE_VS_FLOAT64, F32))
    torch.testing.assert_close(beta.to(F64), want_beta, **tol(REFERENCE_VS_FLOAT64, dtype))
    for old, new in zip(before, (A_log, a, b, dt_bias)):
        assert torch.equal(old, new)


def test_softplus_threshold_region(gen):
    """Around and far beyond the threshold 20 softplus(x) is x: finite where exp(x) overflows float32."""
    heads = 4
    A_log = torch.rand(heads, generator=gen) - 0.5
    dt_bias = torch.zeros(heads)
    a = torch.tensor([[19.5, 20.0, 20.5, 25.0], [50.0, 89.0, 100.0, 300.0], [-20.0, -30.0, -0.5, 0.0]])
    a = a + torch.rand(a.shape, generator=gen) * 0.01  # fresh draws, same regions
    b = torch.randn(a.shape, generator=gen) * 10

    g, beta = fused_gdn_gating(A_log, a, b, dt_bias, backend="torch")

    assert torch.isfinite(g).all()
    want_g, want_beta = gating_float64(A_log, a, b, dt_bias)
    torch.testing.assert_close(g.to(F64), want_g, **tol(REFERENCE_VS_FLOAT64, F32))
    torch.testing.assert_close(beta.to(F64), want_beta, **tol(REFERENCE_VS_FLOAT64, F32))
    above = (a + dt_bias) > 20
    torch.testing.assert_close(g[above], -torch.exp(A_log).expand_as(a)[above] * a[above], rtol=1e-6, atol=0)
