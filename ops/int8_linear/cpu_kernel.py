"""The torch backend of ``int8_linear``: the C++ kernels (``qwen_ops._C``) on the CPU, the reference elsewhere.

``bindings/cpu/int8_linear_cpu.cpp`` streams the int8 weight once per call (a quarter of float32's bytes) with
AVX-512 VNNI (``vpdpbusd``) where the CPU has it and a portable loop elsewhere; both give the reference's bits
for W8A8. Without the extension (``QWEN_OPS_BUILD_EXT=0``) or off the CPU the reference runs.
"""
from __future__ import annotations

import torch

from .._cpu_kernels import cpu_kernel
from .reference import int8_linear_reference

F32 = torch.float32


def int8_linear(*, x, weight, weight_scale, x_scale, quant_bias, bias, out_dtype):
    """Arguments as ``op.int8_linear`` (checked); returns [M, N] in ``out_dtype``."""
    if x.device.type != "cpu":
        return int8_linear_reference(x, weight, weight_scale, x_scale, quant_bias, bias, out_dtype)
    b = None if bias is None else bias.to(F32).contiguous()
    if x.dtype == torch.int8:
        kernel = cpu_kernel("w8a8_linear_cpu")
        if kernel is None:
            return int8_linear_reference(x, weight, weight_scale, x_scale, quant_bias, bias, out_dtype)
        out = kernel(x.contiguous(), x_scale.contiguous(), weight.contiguous(), weight_scale, quant_bias, b)
    else:
        kernel = cpu_kernel("weight_only_int8_linear_cpu")
        if kernel is None:
            return int8_linear_reference(x, weight, weight_scale, x_scale, quant_bias, bias, out_dtype)
        # float32 and bfloat16 x go in as they are (bfloat16 has its own AVX-512 BF16 kernel); float16 is widened.
        xk = x if x.dtype in (F32, torch.bfloat16) else x.to(F32)
        out = kernel(xk.contiguous(), weight.contiguous(), weight_scale, b)
    return out if out.dtype == out_dtype else out.to(out_dtype)
