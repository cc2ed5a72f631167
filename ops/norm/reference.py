"""Reference of ``rms_norm`` (defines its semantics): torch ops in float32, the result cast to x's dtype."""
from __future__ import annotations

import torch


def rms_norm(x: torch.Tensor, scale: torch.Tensor, eps: float) -> torch.Tensor:
    """x [..., H] float32 or bfloat16; scale float32 [H] -> x * rsqrt(mean(x^2) + eps) * scale in x's dtype.

    Also the model's norm wherever the kernel does not serve it (``model/network/layers.py`` ``rms_norm_scaled``):
    its own temporaries are updated in place, which changes no value.
    """
    xf = x.float()
    normed = xf * xf.pow(2).mean(-1, keepdim=True).add_(eps).rsqrt_()
    return normed.mul_(scale).to(x.dtype)
