"""Torch reference of the GDN gates (defines the semantics of ``fused_gdn_gating``).

    g    = -exp(A_log) * softplus(a + dt_bias)   float32 [T, Hv]
    beta = sigmoid(b)                            [T, Hv] in b's dtype

softplus is torch's with beta 1 and threshold 20 (x itself where x > 20).
Everything is computed in float32; beta is rounded to b's dtype at the end.
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
