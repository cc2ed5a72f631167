"""Public ``fused_experts``: argument checks, backend dispatch, torch.library entry.

The routed experts of a MoE layer (Qwen3.5 MoE: SwiGLU experts, transformers'
fused layout). The router (softmax, top-k, renormalisation) is the caller's:
this op takes its result, ``topk_ids`` and ``topk_weights``.

Backends: ``torch`` (``reference.py``, one matmul per expert that received a
token), ``triton`` (``triton_grouped_gemm.py``, a grouped GEMM over the
experts' token ranges) and ``ascendc`` (``ops_ascendc/fused_experts``, the
same grouped GEMM on the cube with SwiGLU and the weighted sum on the vector
cores; docs/ascendc.md).
"""
from __future__ import annotations

from typing import Optional

import torch

from .. import _validate as check
from .._backend import dispatch
from .._library import custom_op

OP = "fused_experts"


def _check(hidden_states, w13, w2, topk_weights, topk_ids, *, values):
    check.tensor(OP, "hidden_states", hidden_states, dtypes=check.FLOAT_DTYPES, ndim=2, layout="[T, H]")
    t, h = hidden_states.shape
    check.tensor(OP, "w13", w13, dtypes=check.FLOAT_DTYPES, ndim=3, layout="[E, 2I, H]")
    check.tensor(OP, "w13", w13, shape=(None, None, h), layout=f"[E, 2I, H] with H = {h}")
    num_experts, two_i, _ = w13.shape
    if num_experts < 1:
        raise ValueError(f"{OP}: argument 'w13' must hold at least one expert (dim 0), got shape {tuple(w13.shape)}")
    if two_i < 2 or two_i % 2:
        raise ValueError(f"{OP}: argument 'w13' must have an even, non-zero dim 1 (2I: gate rows then up rows), "
                         f"got shape {tuple(w13.shape)}")
    inter = two_i // 2
    check.tensor(OP, "w2", w2, dtypes=check.FLOAT_DTYPES, shape=(num_experts, h, inter),
                 layout=f"[E, H, I] = [{num_experts}, {h}, {inter}]")
    check.same_dtype(OP, hidden_states=hidden_states, w13=w13, w2=w2)
    check.tensor(OP, "topk_ids", topk_ids, dtypes=check.INDEX_DTYPES, ndim=2, layout="[T, K]")
    check.tensor(OP, "topk_ids", topk_ids, shape=(t, None), layout=f"[T, K] with T = {t}")
    k = topk_ids.shape[1]
    if not 1 <= k <= num_experts:
        raise ValueError(f"{OP}: argument 'topk_ids' must have 1 <= K <= E = {num_experts} choices per token "
                         f"(dim 1), got shape {tuple(topk_ids.shape)}")
    check.tensor(OP, "topk_weights", topk_weights, dtypes=check.FLOAT_DTYPES, shape=(t, k),
                 layout=f"[T, K] = [{t}, {k}] (same as topk_ids)")
    check.same_device(OP, hidden_states=hidden_states, w13=w13, w2=w2, topk_weights=topk_weights,
                      topk_ids=topk_ids)
    if values and topk_ids.numel():
        bad = (topk_ids < 0) | (topk_ids >= num_experts)
        if bool(bad.any()):
            raise ValueError(f"{OP}: argument 'topk_ids' has expert id {int(topk_ids[bad][0])} outside "
                             f"[0, {num_experts}) (E = w13.shape[0])")


@custom_op(OP)
def _op(hidden_states: torch.Tensor, w13: torch.Tensor, w2: torch.Tensor, topk_weights: torch.Tensor,
        topk_ids: torch.Tensor, backend: Optional[str]) -> torch.Tensor:
    _check(hidden_states, w13, w2, topk_weights, topk_ids, values=check.values_checked(topk_ids.device))
    return dispatch(OP, backend, hidden_states.device, hidden_states=hidden_states, w13=w13, w2=w2,
                    topk_weights=topk_weights, topk_ids=topk_ids)


@_op.register_fake
def _fake(hidden_states, w13, w2, topk_weights, topk_ids, backend):
    _check(hidden_states, w13, w2, topk_weights, topk_ids, values=False)
    return torch.empty_like(hidden_states)


def fused_experts(hidden_states, w13, w2, topk_weights, topk_ids, *, backend: str | None = None) -> torch.Tensor:
    """The routed SwiGLU experts of a MoE layer, tokens grouped by expert.

    Args:
        hidden_states: [T, H] float (float16, bfloat16, float32), any strides.
        w13: [E, 2I, H], same dtype: expert e's gate projection is
            ``w13[e, :I]``, its up projection ``w13[e, I:]`` (transformers'
            ``experts.gate_up_proj``).
        w2: [E, H, I], same dtype: the down projections (``experts.down_proj``).
        topk_weights: [T, K] float, token t's weight for its k-th expert
            (already renormalised by the router; any float dtype, used in float32).
        topk_ids: [T, K] int32/int64 in [0, E): token t's k-th expert.
            1 <= K <= E. A repeated id in a row counts once per slot.
    Returns:
        [T, H] in hidden_states' dtype:
        ``out[t] = sum_k topk_weights[t, k] * (silu(x[t] @ w13[e, :I].T) * (x[t] @ w13[e, I:].T)) @ w2[e].T``
        with ``e = topk_ids[t, k]``, accumulated in float32 (see ``reference.py``
        for the roundings). Experts that no token chose are not read.
    Raises:
        TypeError/ValueError naming the argument for a wrong dtype or shape or
        an expert id outside [0, E); on ``backend="ascendc"``, ValueError for
        max(H, I) past what the kernel's L1 holds (see docs/ascendc.md).
    """
    return torch.ops.qwen_ops.fused_experts(hidden_states, w13, w2, topk_weights, topk_ids, backend)
