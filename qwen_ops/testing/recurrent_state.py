"""Gated DeltaNet inputs: q/k/v/g/beta, the gating projections, state pools and their indices.

Layouts are the ops' (``qwen_ops.ops.chunk_gated_delta_rule`` and
``fused_recurrent_gated_delta_rule``): q, k ``[B, T, Hk, Dk]``, v
``[B, T, Hv, Dv]``, g and beta ``[B, T, Hv]``, states float32
``[rows, Hv, Dk, Dv]``, pool indices ``[N]`` with -1 for padding sequences.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from .draw import Draw


def gdn_inputs(draw: Draw, *, batch, tokens, hk, hv, dk, dv, dtype=torch.float32, l2norm_in_kernel=False,
               decay_center=3.0, decay_spread=1.0) -> list:
    """Fresh [q, k, v, g, beta] that keep the recurrence bounded.

    k has unit norm unless ``l2norm_in_kernel`` (the op normalises q and k
    itself, ``use_qk_l2norm_in_kernel``: then they are left as drawn); g = logsigmoid(center +
    spread * noise) < 0, float32 (the default center 3 is a slow decay, so
    state carries across chunk boundaries; a spread of 4 mixes in very
    strong decays); beta uniform in (0.01, 0.99). q, k, v, beta in ``dtype``.
    """
    q = draw.randn(batch, tokens, hk, dk)
    k = draw.randn(batch, tokens, hk, dk)
    if not l2norm_in_kernel:
        k = k / k.norm(dim=-1, keepdim=True)
    v = draw.randn(batch, tokens, hv, dv)
    g = F.logsigmoid(decay_center + decay_spread * draw.randn(batch, tokens, hv))
    beta = draw.uniform(batch, tokens, hv, low=0.01, high=0.99)
    return [q.to(dtype), k.to(dtype), v.to(dtype), g, beta.to(dtype)]


def state_pool(draw: Draw, rows, hv, dk, dv, *, scale=1.0) -> torch.Tensor:
    """float32 [rows, Hv, Dk, Dv] recurrent states, normal times ``scale``."""
    return draw.randn(rows, hv, dk, dv, scale=scale)


def pool_indices(draw: Draw, n, rows, *, padding=None, dtype=torch.int32) -> torch.Tensor:
    """[n] distinct random pool rows out of ``rows``; entries selected by ``padding`` set to -1."""
    idx = draw.randperm(rows)[:n]
    if padding is not None and n:
        idx[padding] = -1
    return idx.to(dtype)


def gating_inputs(draw: Draw, tokens, heads, dtype, *, a_scale=1.0, b_scale=1.0, param_dtype=torch.float32,
                  dt_bias_dtype=None) -> dict:
    """Keyword arguments of ``fused_gdn_gating``: A_log and dt_bias [Hv], a and b [T, Hv] in ``dtype``.

    ``a`` is normal times ``a_scale`` (a scale of 20 puts softplus on both
    sides of its threshold of 20 and deep into exp underflow).
    """
    A_log = draw.randn(heads, dtype=param_dtype)
    dt_bias = draw.randn(heads, dtype=dt_bias_dtype or param_dtype)
    a = draw.randn(tokens, heads, dtype=dtype, scale=a_scale)
    b = draw.randn(tokens, heads, dtype=dtype, scale=b_scale)
    return dict(A_log=A_log, a=a, b=b, dt_bias=dt_bias)


def decode_step_call(draw: Draw, *, tokens, hk, hv, dk, dv, width, pool_rows, state_indices) -> dict:
    """Keyword arguments of ``gdn_decode_step`` (float32): a GDN layer's projections for ``tokens`` decode tokens,
    both pools of ``pool_rows`` rows, the conv taps [K = width, C], the gate and norm parameters, and
    ``state_indices`` ([B] or, speculative, [B, W]; as given, int32/int64)."""
    channels = 2 * hk * dk + hv * dv
    return dict(mixed_qkv=draw.randn(tokens, channels), z=draw.randn(tokens, hv * dv), b=draw.randn(tokens, hv),
                a=draw.randn(tokens, hv), conv_states=draw.randn(pool_rows, width - 1, channels),
                conv_taps=draw.randn(width, channels, scale=0.5), ssm_states=state_pool(draw, pool_rows, hv, dk, dv,
                                                                                         scale=0.3),
                A_log=draw.randn(hv, scale=0.5), dt_bias=draw.randn(hv, scale=0.5),
                norm_weight=1.0 + draw.randn(dv, scale=0.1), state_indices=torch.as_tensor(state_indices), eps=1e-6)
