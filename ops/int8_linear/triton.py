"""Triton kernel of ``int8_linear``: one tiled GEMM for both forms, chosen by a constexpr.

Work item = a [BLOCK_M, BLOCK_N] tile of the output; the program walks K in ``BLOCK_K`` steps.
* W8A8 (``A_INT8``): ``tl.dot`` of int8 tiles into int32 accumulators (exact; the int8 tensor-core path on
  sm_90), then the reference's epilogue: ``float(acc + quant_bias)`` (formed in int64), ``* x_scale[m]``,
  ``* weight_scale[n]``, ``+ bias``, each a float32 operation in that order.
* weight-only: the int8 weight tile converted to x's dtype (exact: every int8 value is a float16/bfloat16
  value) and multiplied with float32 accumulators at ``_triton.dot_precision`` (IEEE for float32 x), then
  ``* weight_scale[n] + bias``. Under the interpreter both tiles go to float32 first (see the host code).

Ascend UB, bytes with the fixed config (16 x 32 x 64): x tile 16*64*4 + weight tile 32*64 (int8) plus
its converted copy 32*64*4 and the float32 16x32 accumulator: 4 + 2 + 8 + 2 KiB = 16 KiB, far below the
96 KiB of a double-buffered 192 KiB UB.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from .._triton import configured, dot_precision, target


def _fixed(**_shape) -> dict:
    # 16 rows (tl.dot's smallest), 32 columns, 64 of K (int8 dots on sm_90 want K tiles of 32 or more).
    return {"BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_K": 64}


CUDA_CONFIGS = [{"BLOCK_M": m, "BLOCK_N": n, "BLOCK_K": k, "num_warps": 4}
                for m in (16, 64) for n in (64, 128) for k in (64, 128)]


@configured(fixed=_fixed, cuda_configs=CUDA_CONFIGS, key=["M", "N", "K", "A_INT8"])
@triton.jit
def _int8_linear_kernel(
    x, weight, weight_scale, x_scale, quant_bias, bias, out,
    M, N, K, stride_xm, stride_xk, stride_wn, stride_wk, stride_om,
    A_INT8: tl.constexpr, DOT_IN_FLOAT32: tl.constexpr, HAS_QUANT_BIAS: tl.constexpr, HAS_BIAS: tl.constexpr, DOT_PRECISION: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):
    n_tiles = tl.cdiv(N, BLOCK_N)
    n_items = tl.cdiv(M, BLOCK_M) * n_tiles
    for item in tl.range(tl.program_id(0), n_items, tl.num_programs(0)):
        rows = (item // n_tiles) * BLOCK_M + tl.arange(0, BLOCK_M)
        cols = (item % n_tiles) * BLOCK_N + tl.arange(0, BLOCK_N)
        row_ok = rows < M
        col_ok = cols < N
        if A_INT8:
            acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.int32)
        else:
            acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k0 in range(0, K, BLOCK_K):
            ks = k0 + tl.arange(0, BLOCK_K)
            k_ok = ks < K
            a = tl.load(x + rows[:, None].to(tl.int64) * stride_xm + ks[None, :] * stride_xk,
                        mask=row_ok[:, None] & k_ok[None, :], other=0)
            w = tl.load(weight + cols[None, :].to(tl.int64) * stride_wn + ks[:, None] * stride_wk,
                        mask=k_ok[:, None] & col_ok[None, :], other=0)  # [BLOCK_K, BLOCK_N]
            if A_INT8:
                acc = tl.dot(a, w, acc, out_dtype=tl.int32)
            else:
                if DOT_IN_FLOAT32:
                    acc = tl.dot(a.to(tl.float32), w.to(tl.float32), acc, input_precision=DOT_PRECISION)
                else:  # int8 -> x's 16-bit dtype is exact
                    acc = tl.dot(a, w.to(a.dtype), acc, input_precision=DOT_PRECISION)
        w_scale = tl.load(weight_scale + cols, mask=col_ok, other=0.0)
        if A_INT8:
            total = acc.to(tl.int64)
            if HAS_QUANT_BIAS:
                total = total + tl.load(quant_bias + cols, mask=col_ok, other=0).to(tl.int64)[None, :]
            result = total.to(tl.float32) * tl.load(x_scale + rows, mask=row_ok, other=0.0)[:, None]
            result = result * w_scale[None, :]
        else:
            result = acc * w_scale[None, :]
        if HAS_BIAS:
            result = result + tl.load(bias + cols, mask=col_ok, other=0.0).to(tl.float32)[None, :]
        tl.store(out + rows[:, None].to(tl.int64) * stride_om + cols[None, :],
                 result.to(out.dtype.element_ty), mask=row_ok[:, None] & col_ok[None, :])


def int8_linear(*, x, weight, weight_scale, x_scale, quant_bias, bias, out_dtype):
    """Arguments as ``op.int8_linear`` (checked); returns [M, N] in ``out_dtype``."""
    m, k = x.shape
    n = weight.shape[0]
    out = torch.empty((m, n), dtype=out_dtype, device=x.device)
    if m == 0 or n == 0:
        return out
    a_int8 = x.dtype == torch.int8
    kind = target(x.device)
    # The interpreter's dot of a bfloat16 tile made in the kernel (the converted weight) is wrong (measured:
    # values near 1e10), so there both operands go to float32 (exact for int8 and 16-bit values, IEEE sums).
    in_float32 = x.dtype == torch.float32 or kind == "interpreter"
    # An int8 dot takes no input precision (the constexpr is unused there): the output dtype's, so every
    # launch passes the one _triton.dot_precision gives for its float operands.
    precision = dot_precision(kind, out_dtype if a_int8 else torch.float32 if in_float32 else x.dtype)
    fixed = _fixed()
    n_items = triton.cdiv(m, fixed["BLOCK_M"]) * triton.cdiv(n, fixed["BLOCK_N"])
    _int8_linear_kernel.launch(
        x.device, n_items, x, weight, weight_scale, x_scale if a_int8 else weight_scale,
        quant_bias if quant_bias is not None else weight_scale, bias if bias is not None else weight_scale, out,
        m, n, k, x.stride(0), x.stride(1), weight.stride(0), weight.stride(1), out.stride(0),
        A_INT8=a_int8, DOT_IN_FLOAT32=in_float32, HAS_QUANT_BIAS=quant_bias is not None, HAS_BIAS=bias is not None, DOT_PRECISION=precision)
    return out
