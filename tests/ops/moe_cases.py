"""Shared inputs and a float64 loop for the ``fused_experts`` tests (reference and Triton)."""
from __future__ import annotations

import torch
import torch.nn.functional as F


def draw(gen, tokens, hidden, inter, experts, top_k, dtype=torch.float32, ids=None):
    """Random inputs of ``fused_experts``; ``ids`` [T, K] fixes the routing, else K distinct experts per token."""
    x = torch.randn(tokens, hidden, generator=gen).to(dtype)
    w13 = (torch.randn(experts, 2 * inter, hidden, generator=gen) * hidden ** -0.5).to(dtype)
    w2 = (torch.randn(experts, hidden, inter, generator=gen) * inter ** -0.5).to(dtype)
    if ids is None:
        ids = torch.stack([torch.randperm(experts, generator=gen)[:top_k] for _ in range(tokens)]) \
            if tokens else torch.empty(0, top_k, dtype=torch.int64)
    weights = torch.rand(tokens, top_k, generator=gen) + 0.05
    weights = weights / weights.sum(-1, keepdim=True)
    return dict(hidden_states=x, w13=w13, w2=w2, topk_weights=weights, topk_ids=ids)


def experts_without_tokens(gen):
    """21 tokens routed (top-2) to experts 1, 2 and 6 of 8 only; the other experts' weights are NaN, so a
    kernel that reads them shows it."""
    used = torch.tensor([1, 2, 6])
    ids = used[torch.stack([torch.randperm(3, generator=gen)[:2] for _ in range(21)])]
    call = draw(gen, 21, 32, 24, 8, 2, ids=ids)
    for e in (0, 3, 4, 5, 7):
        call["w13"][e] = float("nan")
        call["w2"][e] = float("nan")
    return call


def naive_float64(hidden_states, w13, w2, topk_weights, topk_ids):
    """One (token, slot) at a time in float64: the op's formula written out independently."""
    x, w13, w2, w = (t.double() for t in (hidden_states, w13, w2, topk_weights))
    inter = w13.shape[1] // 2
    out = torch.zeros(x.shape, dtype=torch.float64)
    for t in range(x.shape[0]):
        for k in range(topk_ids.shape[1]):
            e = int(topk_ids[t, k])
            gate, up = w13[e, :inter] @ x[t], w13[e, inter:] @ x[t]
            out[t] += w[t, k] * (w2[e] @ (F.silu(gate) * up))
    return out
