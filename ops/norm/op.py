"""``rms_norm``: ``x * rsqrt(mean(x^2) + eps) * scale`` over the last dim, as ``torch.ops.qwen_ops.rms_norm``.

The model's pre-norms, final norm and q/k norms (``model/network/layers.py`` ``rms_norm_scaled``). As torch
ops one norm is eight calls and their temporaries, which at decode (one row of 1024) cost far more than the
arithmetic; the C++ kernel (``bindings/cpu/rms_norm_cpu.cpp`` in ``qwen_ops._C``) is one call. The operator is
defined in C++ (CPU kernel); this module registers its fake (for ``torch.compile``) and states the contract
(``reference.py`` is the meaning). Without ``qwen_ops._C`` ``rms_norm_available()`` is False and callers use
the torch form.
"""
from __future__ import annotations

import math

import torch

from .. import _validate as check
from .._cpu_kernels import LazyCpuOp

OP = "rms_norm"


def _check(x, scale, eps):
    """The checks of the C++ kernel, for the fake (same conditions, same names)."""
    check.tensor(OP, "x", x, dtypes=(torch.float32, torch.bfloat16))
    if x.dim() < 1 or x.shape[-1] < 1:
        raise ValueError(f"{OP}: argument 'x' must be [..., H] with H >= 1, got shape {tuple(x.shape)}")
    h = x.shape[-1]
    check.tensor(OP, "scale", scale, dtypes=(torch.float32,), shape=(h,), layout=f"[H] = [{h}]")
    if not (x.is_contiguous() or (x.dim() == 2 and x.stride(1) == 1 and x.stride(0) >= h)):
        raise ValueError(f"{OP}: argument 'x' must be contiguous, or 2-D with contiguous rows, got shape "
                         f"{tuple(x.shape)} and strides {x.stride()}")
    if not scale.is_contiguous():
        raise ValueError(f"{OP}: argument 'scale' must be contiguous")
    check.same_device(OP, x=x, scale=scale)
    if not (isinstance(eps, (int, float)) and math.isfinite(eps) and eps >= 0):
        raise ValueError(f"{OP}: argument 'eps' must be finite and >= 0, got {eps!r}")


def _rms_norm_fake(x, scale, eps):
    _check(x, scale, eps)
    return x.new_empty(x.shape)


_CPU_KERNEL = LazyCpuOp(OP, _rms_norm_fake)


def rms_norm_available() -> bool:
    """True when ``qwen_ops._C`` was built with the CPU kernel (False on a pure-Python install,
    ``QWEN_OPS_BUILD_EXT=0``). The first call loads the extension and registers the operator's fake."""
    return _CPU_KERNEL.available()


def rms_norm(x: torch.Tensor, scale: torch.Tensor, eps: float) -> torch.Tensor:
    """``x * rsqrt(mean(x^2) + eps) * scale`` over the last dim, on the CPU.

    Args:
        x: [..., H] float32 or bfloat16, CPU; contiguous, or 2-D [R, H] with contiguous rows at any row stride.
        scale: float32 [H], contiguous (for Qwen3.5's zero-centred weights ``1 + w``, made once at load).
        eps: finite, >= 0.
    Returns:
        A new contiguous tensor of x's shape and dtype: float32 arithmetic in the reference's order of
        operations, the result rounded once to x's dtype. Only the order of the float32 sum of squares differs
        from torch's ``mean`` (lanes of 16, then the lanes), so it equals ``reference.rms_norm`` up to float32
        rounding (bfloat16: up to the rounding that difference can tip).
    Raises:
        RuntimeError naming the argument on a wrong device, dtype, shape, a non-contiguous x or a bad eps (the
        C++ checks); RuntimeError when ``qwen_ops._C`` lacks the kernel.
    """
    if not rms_norm_available():
        raise RuntimeError(f"{OP}: qwen_ops._C is not built (or lacks the CPU kernel); use the torch form")
    return torch.ops.qwen_ops.rms_norm(x, scale, float(eps))
