"""Group the (token, slot) pairs of a routing by expert: one stable sort per layer.

Both backends of ``fused_experts`` start here. A routing ``topk_ids`` [T, K]
has P = T*K pairs; pair ``p`` is token ``p // K``'s ``p % K``-th choice.
Sorting the flat expert ids once puts each expert's pairs in one contiguous
range, so the expert computation is a matmul per expert range (a grouped
GEMM) instead of a loop over tokens.
"""
from __future__ import annotations

import torch


def sort_by_expert(topk_ids: torch.Tensor, num_experts: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Pairs ordered by expert and each expert's range in that order.

    topk_ids: [T, K] int32/int64, values in [0, E) (checked by the op).
    Returns ``(pairs, offsets)``: ``pairs`` [P] int64, the pair indices sorted
    by expert id (stable: within an expert, in token order); ``offsets`` [E+1]
    int64, expert ``e``'s pairs are ``pairs[offsets[e]:offsets[e+1]]``.
    """
    flat = topk_ids.reshape(-1).to(torch.int64)
    pairs = torch.argsort(flat, stable=True)
    counts = torch.bincount(flat, minlength=num_experts)
    offsets = torch.zeros(num_experts + 1, dtype=torch.int64, device=flat.device)
    offsets[1:] = torch.cumsum(counts, 0)
    return pairs, offsets
