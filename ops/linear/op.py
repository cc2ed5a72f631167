"""``small_m_linear``: ``x @ weight^T (+ bias)`` on the CPU for few rows of x, as ``torch.ops.qwen_ops.small_m_linear``.

At decode every projection is a product of a few rows (the batch) with a large weight that must be
streamed from memory once; torch's ``F.linear`` (MKL sgemm/sgemv) reads well below the machine's
bandwidth at such shapes. The kernel (``bindings/cpu/small_m_linear*.cpp`` in ``qwen_ops._C``, OpenMP
through torch's intra-op pool, AVX-512 / AVX2 / portable chosen at run time) reads each weight row
once for all rows of x. The operator is defined in C++ (CPU kernel); this module registers its fake
(shape-only, for ``torch.compile``) and states the contract. Without ``qwen_ops._C`` (a pure-Python
install) ``small_m_linear_available()`` is False and callers use ``F.linear``.
"""
from __future__ import annotations

import torch

from .. import _validate as check
from .._cpu_kernels import cpu_kernel, cpu_torch_op_available

OP = "small_m_linear"
# Rows of x up to which the model's projections take this kernel on the CPU (decode batches); larger
# products (prefill) stay with F.linear. Measured (bench/RESULTS.md, "The small-M projection kernel:
# the read rate at M = 1, and past 16 rows"; one core, CPU time): at K = 128 (the tiny model's lm_head)
# the kernel was faster at every M up to 64 (1.62x at 32, 1.05x at 48-64) and F.linear from 96; at
# K = 1024 / 3584 the kernel was faster up to 256 (1.09x-2.89x).
SMALL_M_MAX_ROWS = 64

_AVAILABLE = cpu_torch_op_available(OP)  # False on a pure-Python install (QWEN_OPS_BUILD_EXT=0)


def small_m_linear_available() -> bool:
    """True when ``qwen_ops._C`` was built with the CPU kernel."""
    return _AVAILABLE


def small_m_linear_bf16_simd() -> bool:
    """True when bfloat16 operands run the AVX-512 BF16 variant (``vdpbf16ps``) on this CPU; without it the
    op still takes bfloat16 (a portable loop, for checks), but the model leaves bfloat16 to F.linear."""
    variants = cpu_kernel("small_m_linear_bf16_variants")
    return _AVAILABLE and variants is not None and "avx512_bf16" in variants()


def _check(x, weight, bias):
    """The checks of the C++ kernel, for the fake (same conditions, same names)."""
    check.tensor(OP, "x", x, dtypes=(torch.float32, torch.bfloat16), ndim=2, layout="[M, K]")
    k = x.shape[1]
    check.tensor(OP, "weight", weight, dtypes=(x.dtype,), shape=(None, k), layout=f"[N, K] with K = {k}")
    check.optional(OP, "bias", bias, dtypes=(x.dtype,), shape=(weight.shape[0],),
                   layout=f"[N] = [{weight.shape[0]}]")
    check.same_device(OP, x=x, weight=weight, bias=bias)


if _AVAILABLE:
    @torch.library.register_fake(f"qwen_ops::{OP}")
    def _small_m_linear_fake(x, weight, bias=None):
        _check(x, weight, bias)
        return x.new_empty((x.shape[0], weight.shape[0]))


def small_m_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``x @ weight.T + bias`` for a small number of rows M of x, on the CPU.

    Args:
        x: [M, K] float32 or bfloat16, contiguous, CPU. Any M works; the model sends it M <=
            ``SMALL_M_MAX_ROWS`` (64), where it was measured faster than F.linear.
        weight: [N, K] of x's dtype, contiguous, CPU (the ``nn.Linear`` layout).
        bias: [N] of x's dtype, contiguous, or None.
    Returns:
        [M, N] of x's dtype, a new tensor. float32: equal to ``F.linear(x, weight, bias)`` up to float32
        rounding: the sums over K are taken in SIMD-lane order, not MKL's (tests/tolerances.py
        SMALL_M_LINEAR). bfloat16: the products and sums in float32 (AVX-512 BF16's ``vdpbf16ps`` where the
        CPU has it, which reads denormal inputs as 0), the result rounded once to bfloat16 (nearest even), so
        within one bfloat16 rounding of the float32 product of the same operands (SMALL_M_LINEAR_BF16).
        Row m of the result is the same bitwise whatever M is (every output is summed in one order).
    Raises:
        RuntimeError naming the argument on a wrong device, rank, shape, dtype or a non-contiguous
        operand (the C++ checks); RuntimeError when ``qwen_ops._C`` lacks the kernel.
    """
    if not _AVAILABLE:
        raise RuntimeError(f"{OP}: qwen_ops._C is not built (or lacks the CPU kernel); use F.linear")
    return torch.ops.qwen_ops.small_m_linear(x, weight, bias)
