"""Reference of ``rms_norm`` (defines its semantics): torch ops in float32, the result cast to x's dtype."""
from __future__ import annotations

import torch


def rms_norm(x: torch.Tensor, scale: torch.Tensor, eps: float) -> torch.Tensor:
    """x [..., H] float32 or bfloat16; scale float32 [H] -> x * rsqrt(mean(x^2) + eps) * scale in x's dtype."""
    xf = x.float()
    normed = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return (normed * scale).to(x.dtype)
