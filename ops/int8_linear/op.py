"""Public ``int8_linear``: argument checks, backend dispatch, torch.library entry.

A projection ``x @ W^T`` whose weight is stored as int8 with a float32 scale per output channel
(``W[n, k] = weight[n, k] * weight_scale[n]``: msModelSlim's per-channel symmetric INT8 weights, and the
engine's weight-only INT8 mode), in two forms chosen by x's dtype:

* W8A8 (x int8, quantized by ``activation_quant``): the products summed exactly in int32, then
  ``float(acc + quant_bias) * x_scale[m] * weight_scale[n] + bias`` (msModelSlim's ``W8A8`` passes its
  ``quant_bias`` and ``x_scale`` = its ``input_scale`` for every row, ``W8A8_DYNAMIC`` the per-token scales).
* weight-only (x float16/bfloat16/float32): ``(x @ float(weight)^T) * weight_scale + bias``, float32 sums.

Backends: ``torch`` (``cpu_kernel.py``: the C++ kernels of ``bindings/cpu/int8_linear*.cpp`` on the CPU,
AVX-512 VNNI or portable chosen at run time; the reference elsewhere) and ``triton`` (``triton.py``).
"""
from __future__ import annotations

from typing import Optional

import torch

from .. import _validate as check
from .._backend import dispatch
from .._cpu_kernels import LazyCpuOp
from .._library import custom_op

OP = "int8_linear"
# The int32 sums are exact while 128 * 128 * K < 2^31 (the C++ dispatcher checks the same bound).
MAX_K = 65536


def _check(x, weight, weight_scale, x_scale, quant_bias, bias, out_dtype):
    check.tensor(OP, "x", x, dtypes=check.FLOAT_DTYPES + (torch.int8,), ndim=2, layout="[M, K]")
    k = x.shape[1]
    if k > MAX_K:
        raise ValueError(f"{OP}: argument 'x' must have K <= {MAX_K} (exact int32 sums), got K = {k}")
    check.tensor(OP, "weight", weight, dtypes=(torch.int8,), shape=(None, k), layout=f"[N, K] with K = {k}")
    n = weight.shape[0]
    check.tensor(OP, "weight_scale", weight_scale, dtypes=(torch.float32,), shape=(n,), layout=f"[N] = [{n}]")
    check.optional(OP, "bias", bias, dtypes=check.FLOAT_DTYPES, shape=(n,), layout=f"[N] = [{n}]")
    if x.dtype == torch.int8:
        if x_scale is None:
            raise ValueError(f"{OP}: argument 'x_scale' [M] float32 is required when x is int8 (W8A8)")
        check.tensor(OP, "x_scale", x_scale, dtypes=(torch.float32,), shape=(x.shape[0],),
                     layout=f"[M] = [{x.shape[0]}]")
        check.optional(OP, "quant_bias", quant_bias, dtypes=(torch.int32,), shape=(n,), layout=f"[N] = [{n}]")
    elif x_scale is not None or quant_bias is not None:
        raise ValueError(f"{OP}: arguments 'x_scale' and 'quant_bias' belong to int8 x (W8A8); x is {x.dtype} "
                         "(weight-only), so both must be None")
    if out_dtype is not None and out_dtype not in check.FLOAT_DTYPES:
        raise ValueError(f"{OP}: argument 'out_dtype' must be None or one of float16, bfloat16, float32, "
                         f"got {out_dtype}")
    check.same_device(OP, x=x, weight=weight, weight_scale=weight_scale, x_scale=x_scale, quant_bias=quant_bias,
                      bias=bias)


# The CPU weight-only kernel as its own torch operator (bindings/cpu/int8_linear_cpu.cpp), which the model's
# decode projections call directly (model/network/layers.py int8_projection): x [M, K] contiguous, the torch
# backend's kernel without this op's Python dispatch. Its fake is registered here.
WEIGHT_ONLY_CPU_OP = "weight_only_int8_linear"

# x's dtypes for the C++ operator; the result is in x's dtype (bfloat16: float32 sums rounded once, by the
# AVX-512 BF16 kernel where the CPU has it, else by the float32 kernel on x widened).
WEIGHT_ONLY_CPU_X_DTYPES = (torch.float32, torch.bfloat16)


def _weight_only_cpu_fake(x, weight, weight_scale, bias=None):
    """``weight_only_int8_linear``'s fake: float32 or bfloat16 x [M, K] -> [M, N] in x's dtype."""
    check.tensor(WEIGHT_ONLY_CPU_OP, "x", x, dtypes=WEIGHT_ONLY_CPU_X_DTYPES, ndim=2, layout="[M, K]")
    _check(x, weight, weight_scale, None, None, bias, None)
    return x.new_empty((x.shape[0], weight.shape[0]))


_WEIGHT_ONLY_CPU = LazyCpuOp(WEIGHT_ONLY_CPU_OP, _weight_only_cpu_fake)


def weight_only_cpu_op_available() -> bool:
    """True when ``qwen_ops._C`` has ``torch.ops.qwen_ops.weight_only_int8_linear`` (the CPU kernel). The first
    call loads the extension and registers the operator's fake."""
    return _WEIGHT_ONLY_CPU.available()


def _out_dtype(x: torch.Tensor, out_dtype: torch.dtype | None) -> torch.dtype:
    return out_dtype or (torch.float32 if x.dtype == torch.int8 else x.dtype)


@custom_op(OP)
def _op(x: torch.Tensor, weight: torch.Tensor, weight_scale: torch.Tensor, x_scale: Optional[torch.Tensor],
        quant_bias: Optional[torch.Tensor], bias: Optional[torch.Tensor], out_dtype: Optional[torch.dtype],
        backend: Optional[str]) -> torch.Tensor:
    _check(x, weight, weight_scale, x_scale, quant_bias, bias, out_dtype)
    return dispatch(OP, backend, x.device, x=x, weight=weight, weight_scale=weight_scale, x_scale=x_scale,
                    quant_bias=quant_bias, bias=bias, out_dtype=_out_dtype(x, out_dtype))


@_op.register_fake
def _fake(x, weight, weight_scale, x_scale, quant_bias, bias, out_dtype, backend):
    _check(x, weight, weight_scale, x_scale, quant_bias, bias, out_dtype)
    return x.new_empty((x.shape[0], weight.shape[0]), dtype=_out_dtype(x, out_dtype))


def int8_linear(x: torch.Tensor, weight: torch.Tensor, weight_scale: torch.Tensor, *,
                x_scale: torch.Tensor | None = None, quant_bias: torch.Tensor | None = None,
                bias: torch.Tensor | None = None, out_dtype: torch.dtype | None = None,
                backend: str | None = None) -> torch.Tensor:
    """``x @ (weight * weight_scale[:, None])^T + bias`` for an int8 weight with per-channel scales.

    Args:
        x: [M, K]: int8 (W8A8: already quantized, see ``quantize_per_token`` / ``quantize_static``) or
            float16/bfloat16/float32 (weight-only). K <= ``MAX_K`` (65536).
        weight: [N, K] int8 (the nn.Linear layout), any strides.
        weight_scale: [N] float32, the per-channel scale (msModelSlim's ``weight_scale`` [N, 1] flattened).
        x_scale: [M] float32, W8A8 only (required there): the scale of each row of x.
        quant_bias: [N] int32 or None, W8A8 only: added to the int32 sums (msModelSlim's static ``quant_bias``).
        bias: [N] float or None, added in float32 after scaling.
        out_dtype: the result's dtype; default x's dtype (weight-only) or float32 (W8A8).
    Returns:
        [M, N] in ``out_dtype``, a new tensor. W8A8: bitwise ``reference.int8_linear_reference`` (exact int32
        sums, the same four float32 roundings) on the CPU kernels and the Triton interpreter. Weight-only:
        within float32 rounding of the reference (sums over K in another order; tests/tolerances.py).
    Raises:
        TypeError/ValueError naming the argument on a wrong dtype, shape, device, a missing ``x_scale`` for int8
        x, or ``x_scale``/``quant_bias`` given with float x.
    """
    return torch.ops.qwen_ops.int8_linear(x, weight, weight_scale, x_scale, quant_bias, bias, out_dtype, backend)
