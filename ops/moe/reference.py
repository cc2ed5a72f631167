"""Torch reference of ``fused_experts`` (defines its semantics).

For every token t and slot k, with e = topk_ids[t, k]:

    gate_up = x[t] @ w13[e].T               # [2I]: gate rows first, then up rows
    a       = silu(gate_up[:I]) * gate_up[I:]   (float32, rounded to x's dtype)
    y[t,k]  = a @ w2[e].T                   # [H], float32
    out[t]  = sum_k topk_weights[t, k] * y[t, k]   (float32, rounded to x's dtype)

The matmuls take x's dtype and accumulate in float32 (torch's CPU and GPU
matmuls do); the SwiGLU product is rounded to x's dtype because it is the
input of the second matmul. Pairs are grouped by expert once
(``grouping.sort_by_expert``): one matmul per expert that received a token, a
Python loop over experts (never over tokens), with one host read of the
expert ranges per call. Expert results are added into the float32 output in
ascending expert order, as transformers 5.24's ``Qwen3_5MoeExperts`` does.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from .grouping import sort_by_expert


def fused_experts(*, hidden_states, w13, w2, topk_weights, topk_ids):
    """hidden_states [T, H]; w13 [E, 2I, H]; w2 [E, H, I]; topk_weights [T, K] float; topk_ids [T, K] int.

    Returns [T, H] in hidden_states' dtype (arguments validated by ``ops/moe/op.py``).
    """
    x = hidden_states
    t, h = x.shape
    k = topk_ids.shape[1]
    num_experts, two_i, _ = w13.shape
    inter = two_i // 2
    out = torch.zeros((t, h), dtype=torch.float32, device=x.device)
    if t == 0:
        return out.to(x.dtype)
    pairs, offsets = sort_by_expert(topk_ids, num_experts)
    weights = topk_weights.reshape(-1).to(torch.float32)
    bounds = offsets.tolist()  # the one host read: each expert's pair range
    for e in range(num_experts):
        lo, hi = bounds[e], bounds[e + 1]
        if lo == hi:
            continue  # no token chose this expert: its weights are never read
        expert_pairs = pairs[lo:hi]
        tokens = expert_pairs // k
        gate_up = F.linear(x[tokens], w13[e]).float()
        act = (F.silu(gate_up[:, :inter]) * gate_up[:, inter:]).to(x.dtype)
        y = F.linear(act, w2[e]).float() * weights[expert_pairs, None]
        out.index_add_(0, tokens, y)
    return out.to(x.dtype)
