"""The activation quantizers of msModelSlim's W8A8 schemes, in torch (traceable by ``torch.compile``).

* ``W8A8_DYNAMIC``: per token, symmetric: ``scale[t] = max_k |x[t, k]| / 127`` (1 where a row is all zero, so
  the row quantizes to zeros), ``q = round(x / scale[t])``, in [-127, 127].
* ``W8A8`` (static): one calibrated ``input_scale`` and ``input_offset`` per layer:
  ``q = clamp(round(x / input_scale + input_offset), -128, 127)``; the offset's share of the product,
  ``input_offset * sum_k w[n, k]``, is what the checkpoint's ``quant_bias`` takes away.

Rounding is torch's: half to even. Every quotient is a float32 division (not a multiply by the reciprocal).
"""
from __future__ import annotations

import torch

INT8_MAX = 127.0


def quantize_per_token(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """x [M, K] float -> (q int8 [M, K], scale float32 [M]) with ``x ~= q * scale[:, None]``."""
    xf = x.float()
    absmax = xf.abs().amax(dim=-1)
    scale = torch.where(absmax > 0, absmax / INT8_MAX, torch.ones_like(absmax))
    q = torch.round(xf / scale[:, None]).clamp_(-INT8_MAX, INT8_MAX).to(torch.int8)
    return q, scale


def quantize_static(x: torch.Tensor, input_scale: torch.Tensor, input_offset: torch.Tensor) -> torch.Tensor:
    """x [M, K] float -> q int8 [M, K] = clamp(round(x / input_scale + input_offset), -128, 127).

    input_scale, input_offset: float32 [1] (the layer's calibrated values; the offset an integer).
    """
    q = torch.round(x.float() / input_scale + input_offset)
    return q.clamp_(-128.0, 127.0).to(torch.int8)
