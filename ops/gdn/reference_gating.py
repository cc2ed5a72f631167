"""Torch definitions of the GDN gates: ``fused_gdn_gating`` (its reference) and the output gate ``gated_rms_norm``.

    g    = -exp(A_log) * softplus(a + dt_bias)   float32 [T, Hv]
    beta = sigmoid(b)                            [T, Hv] in b's dtype

softplus is torch's with beta 1 and threshold 20 (x itself where x > 20).
Everything is computed in float32; beta is rounded to b's dtype at the end.

``gated_rms_norm`` is the GDN layer's output norm gated by z: the model runs it as it stands
(``model/network/gdn.py``) and ``gdn_decode_step``'s reference ends with it, so it lives here, below both.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

SOFTPLUS_THRESHOLD = 20.0


def fused_gdn_gating(*, A_log, a, b, dt_bias):
    """A_log, dt_bias: [Hv]; a, b: [T, Hv]; float dtypes. Returns (g float32 [T, Hv], beta [T, Hv] in b's dtype)."""
    f32 = torch.float32
    decay_rate = torch.exp(A_log.to(f32))
    g = -decay_rate * F.softplus(a.to(f32) + dt_bias.to(f32), beta=1.0, threshold=SOFTPLUS_THRESHOLD)
    beta = torch.sigmoid(b.to(f32)).to(b.dtype)
    return g, beta


def gated_rms_norm(x: torch.Tensor, gate: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """The GDN output norm: ``w * rmsnorm(x) * silu(gate)`` with a plain (not zero-centred) weight.

    x, gate: [..., D]; weight: [D]. The normalised x is cast to x's dtype before
    the weight, and the gate is applied in float32, as transformers does.
    """
    xf = x.float()
    normed = (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)
    return ((weight * normed).float() * F.silu(gate.float())).to(x.dtype)
