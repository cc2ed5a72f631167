"""Reference of ``small_m_linear``: torch's own linear, ``x @ weight^T + bias``.

The kernel computes exactly this product; only the order of the float32 sums over K differs.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F


def small_m_linear_reference(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """x [M, K], weight [N, K], bias [N] or None -> [M, N] (``F.linear``)."""
    return F.linear(x, weight, bias)
