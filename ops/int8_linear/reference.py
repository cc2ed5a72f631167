"""Reference of ``int8_linear`` in torch: the meaning every kernel is tested against.

W8A8 (x int8): the products are summed exactly in int64, the int32 ``quant_bias`` added, the sum converted to
float32 once, then multiplied by ``x_scale[m]``, then by ``weight_scale[n]``, then ``bias[n]`` added: four
float32 roundings in that order, which the C++ and Triton kernels repeat, so they agree bitwise.

Weight-only (x float): ``(x @ float(weight)^T) * weight_scale + bias`` in float32; kernels sum over K in their
own order (float32 rounding apart).
"""
from __future__ import annotations

import torch


def int8_linear_reference(x: torch.Tensor, weight: torch.Tensor, weight_scale: torch.Tensor,
                          x_scale: torch.Tensor | None = None, quant_bias: torch.Tensor | None = None,
                          bias: torch.Tensor | None = None, out_dtype: torch.dtype | None = None) -> torch.Tensor:
    """Arguments as ``op.int8_linear`` (already checked) -> [M, N] in ``out_dtype``."""
    if x.dtype == torch.int8:
        acc = x.to(torch.int64) @ weight.to(torch.int64).T  # exact
        if quant_bias is not None:
            acc = acc + quant_bias.to(torch.int64)
        out = acc.to(torch.float32) * x_scale.float()[:, None]
        out = out * weight_scale.float()[None, :]
    else:
        out = (x.float() @ weight.float().T) * weight_scale.float()[None, :]
    if bias is not None:
        out = out + bias.float()
    return out.to(out_dtype or (torch.float32 if x.dtype == torch.int8 else x.dtype))


def dequantize_weight(weight: torch.Tensor, weight_scale: torch.Tensor) -> torch.Tensor:
    """float32 [N, K] = ``float(weight) * weight_scale[:, None]``: the float weight an INT8 one stands for."""
    return weight.float() * weight_scale.float()[:, None]
