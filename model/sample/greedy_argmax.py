"""Greedy token choice over a large vocabulary: ``torch.argmax`` in two cheap passes.

The network's head takes the greedy tokens straight from the final hidden states with it, without the
[S, V] logits (``network/greedy_head.py``).

On the CPU ``argmax`` over the last dim of [S, V] float32 logits ran about ten times slower than
``amax`` at [32, 248320] (bench/RESULTS.md, section "Scheduler speed and the engine's host
overhead"), and it runs for every sampling row of every step. This returns exactly what ``argmax`` does (the first index of the row maximum) from the maxima of blocks of
``BLOCK`` tokens: the first block holding the row maximum, then ``argmax`` inside that block only.
"""
from __future__ import annotations

import torch

BLOCK = 1024  # tokens per block: V / BLOCK block maxima and one block per row for the second pass
MIN_VOCAB = 8 * BLOCK  # below this, one argmax is as cheap as the two passes


def greedy_argmax(logits: torch.Tensor) -> torch.Tensor:
    """``logits.argmax(dim=-1)`` of 2-D ``logits`` [S, V] (any floating dtype, any device): int64 [S].

    Same result as ``torch.argmax``, ties included (the first maximum wins). A row holding NaN
    (which ``argmax`` treats as the maximum) falls back to ``torch.argmax`` for the whole batch.
    """
    if logits.dim() != 2 or not logits.is_floating_point():
        raise ValueError(f"greedy_argmax: logits must be a 2-D floating tensor [S, V], got {logits.dtype} "
                         f"{tuple(logits.shape)}")
    rows, vocab = logits.shape
    if vocab < MIN_VOCAB or rows == 0:
        return logits.argmax(dim=-1)
    num_full = vocab // BLOCK
    maxima = logits[:, : num_full * BLOCK].unflatten(-1, (num_full, BLOCK)).amax(dim=-1)  # [S, num_full]
    if vocab > num_full * BLOCK:  # the shorter last block
        maxima = torch.cat([maxima, logits[:, num_full * BLOCK:].amax(dim=-1, keepdim=True)], dim=1)
    row_max = maxima.amax(dim=-1, keepdim=True)
    if bool(row_max.isnan().any()):
        return logits.argmax(dim=-1)
    # The first block whose maximum is the row maximum holds the first maximum of the row.
    block = (maxima == row_max).to(torch.uint8).argmax(dim=-1)  # [S], small
    start = block * BLOCK
    # Positions past the end (the last block is shorter) repeat position V - 1, which comes earlier
    # in the block: argmax's first occurrence is never one of them.
    index = (start[:, None] + torch.arange(BLOCK, device=logits.device)).clamp_(max=vocab - 1)
    return start + logits.gather(1, index).argmax(dim=-1)
