"""Triton kernel for ``fused_gdn_gating``: the per-token decay and write strength of GDN.

Semantics (see ``ops/gdn/op.py``): for a [T, Hv] pair of projections,
``g = -exp(A_log) * softplus(a + dt_bias)`` in float32 (softplus as torch's:
``x`` above 20, else ``log1p(exp(x))``; NaN stays NaN, +-inf give
+-inf and 0) and ``beta = sigmoid(b)`` in b's dtype.

Work item: a block of ``BLOCK_T`` tokens times all Hv heads (``BLOCK_H`` is Hv
rounded up to a power of two), so ``A_log`` and ``dt_bias`` are loaded once
per program. Ascend UB, bytes per buffer: the a and b tiles in their dtype plus
the g (float32) and beta tiles, ``BLOCK_T * BLOCK_H * (2 * itemsize + 4 +
itemsize)``; with the fixed ``BLOCK_T = 64`` and Hv = 32 in bfloat16 that is
64 * 32 * 10 = 20 KiB, far below the 96 KiB a double-buffered 192 KiB UB allows.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from .._triton import configured

# torch.nn.functional.softplus switches to the identity above this input.
SOFTPLUS_THRESHOLD = 20.0


@triton.jit
def softplus(x, THRESHOLD: tl.constexpr):
    """torch's softplus (beta 1) of a float32 tile: ``x`` above ``THRESHOLD``, else ``log1p(exp(x))``; NaN stays NaN.

    Shared with the fused decode step (``decode_step/triton.py``), which computes the same gate in its launch.
    """
    # log1p(e) without a log1p intrinsic (Kahan): log(u) * e / (u - 1) with
    # u = 1 + e is accurate to a few ulp even where 1 + e rounds to 1.
    e = tl.exp(tl.minimum(x, THRESHOLD))
    u = 1.0 + e
    exact = u == 1.0
    log1p_e = tl.where(exact, e, tl.log(u) * (e / tl.where(exact, 1.0, u - 1.0)))
    # NaN must come out as NaN, as in torch: ``x > THRESHOLD`` is False for
    # NaN, and ``tl.minimum`` above may drop a NaN operand (its default
    # ``propagate_nan`` is NONE: unspecified), so NaN takes the ``x`` branch.
    return tl.where((x > THRESHOLD) | (x != x), x, log1p_e)


def _fixed(**_shape) -> dict:
    # 64 tokens x Hv heads: one tile per program step, small enough for the UB.
    return {"BLOCK_T": 64}


@configured(
    fixed=_fixed,
    cuda_configs=[{"BLOCK_T": bt, "num_warps": w} for bt in (32, 64, 128) for w in (2, 4)],
    key=["T", "HV"],
)
@triton.jit
def _gdn_gating_kernel(
    A_log, a, b, dt_bias, g_out, beta_out,
    T, HV, stride_a_t, stride_a_h, stride_b_t, stride_b_h,
    BLOCK_T: tl.constexpr, BLOCK_H: tl.constexpr, THRESHOLD: tl.constexpr,
):
    heads = tl.arange(0, BLOCK_H)
    head_ok = heads < HV
    decay_rate = -tl.exp(tl.load(A_log + heads, mask=head_ok, other=0.0).to(tl.float32))
    bias = tl.load(dt_bias + heads, mask=head_ok, other=0.0).to(tl.float32)
    n_blocks = tl.cdiv(T, BLOCK_T)
    for blk in tl.range(tl.program_id(0), n_blocks, tl.num_programs(0)):
        tokens = tl.cast(blk, tl.int64) * BLOCK_T + tl.arange(0, BLOCK_T)
        ok = (tokens < T)[:, None] & head_ok[None, :]
        a_tile = tl.load(a + tokens[:, None] * stride_a_t + heads[None, :] * stride_a_h, mask=ok, other=0.0)
        b_tile = tl.load(b + tokens[:, None] * stride_b_t + heads[None, :] * stride_b_h, mask=ok, other=0.0)
        g = decay_rate[None, :] * softplus(a_tile.to(tl.float32) + bias[None, :], THRESHOLD)
        beta = 1.0 / (1.0 + tl.exp(-b_tile.to(tl.float32)))
        out = tokens[:, None] * HV + heads[None, :]
        tl.store(g_out + out, g, mask=ok)
        tl.store(beta_out + out, beta.to(beta_out.dtype.element_ty), mask=ok)


def fused_gdn_gating(*, A_log: torch.Tensor, a: torch.Tensor, b: torch.Tensor, dt_bias: torch.Tensor):
    """Triton ``fused_gdn_gating``; arguments as validated by ``ops/gdn/op.py``.

    A_log, dt_bias: [Hv] float; a, b: [T, Hv] float (any strides).
    Returns (g float32 [T, Hv], beta [T, Hv] in b's dtype), both contiguous.
    """
    t, hv = a.shape
    g = torch.empty((t, hv), dtype=torch.float32, device=a.device)
    beta = torch.empty((t, hv), dtype=b.dtype, device=b.device)
    if t == 0:
        return g, beta
    block_h = triton.next_power_of_2(hv)
    # Work items counted with the smallest BLOCK_T of any config; programs past
    # the real block count of a larger BLOCK_T find no work and exit.
    n_blocks_upper = triton.cdiv(t, 32)
    _gdn_gating_kernel.launch(
        a.device, n_blocks_upper,
        A_log.contiguous(), a, b, dt_bias.contiguous(), g, beta,
        t, hv, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
        BLOCK_H=block_h, THRESHOLD=SOFTPLUS_THRESHOLD,
    )
    return g, beta
