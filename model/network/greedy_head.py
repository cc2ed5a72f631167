"""The greedy tokens straight from the final hidden states, without the [S, V] logits: the lm_head and
``greedy_argmax`` (``sample/greedy_argmax.py``) taken one vocabulary slice at a time.
"""
from __future__ import annotations

import os
from dataclasses import replace

import torch

from ..loading.quantization import Int8Weight
from ..sample.greedy_argmax import BLOCK, MIN_VOCAB, greedy_argmax
from .layers import WEIGHT_ONLY_KERNEL_MAX_ROWS, linear

# Float32 logits of one vocabulary slice in linear_greedy_argmax (QWEN_OPS_HEAD_SLICE_BYTES; 0: the whole
# vocabulary in one pass). Slices of about the L2 cache (1 MB) keep the logits in cache for the argmax, but
# on the project's 2-core machine, with F.linear serving the lm_head at 32 rows, they were slower than one
# pass (bench/RESULTS.md, section "Decode step outside the projections"), so the default is one pass. The
# slices stay as an option (tested for exactness in tests/model/test_greedy_argmax.py) because they were
# measured only there: the lm_head's logits at a large batch on another device may not fit its cache.
HEAD_SLICE_BYTES = int(os.environ.get("QWEN_OPS_HEAD_SLICE_BYTES", "0"))


# An INT8 head ("int8_weight_only") past WEIGHT_ONLY_KERNEL_MAX_ROWS hidden rows runs dequantized for the
# call (``layers.int8_projection``): this many vocabulary rows at a time (32 MB of float32 at H = 1024) rather
# than the whole [V, H] head in float32 per step. A multiple of BLOCK, at least MIN_VOCAB.
INT8_HEAD_SLICE_ROWS = MIN_VOCAB


def head_rows(weight: torch.Tensor | Int8Weight, start: int, end: int) -> torch.Tensor | Int8Weight:
    """Vocabulary rows [start, end) of the head: a float [V, H] tensor's or an ``Int8Weight``'s (with its scales)."""
    if not isinstance(weight, Int8Weight):
        return weight[start:end]
    quant_bias = None if weight.quant_bias is None else weight.quant_bias[start:end]
    return replace(weight, weight=weight.weight[start:end], weight_scale=weight.weight_scale[start:end],
                   quant_bias=quant_bias)


def _int8_slices(weight, rows: int) -> bool:
    return isinstance(weight, Int8Weight) and rows > WEIGHT_ONLY_KERNEL_MAX_ROWS


def head_logits(hidden: torch.Tensor, weight: torch.Tensor | Int8Weight) -> torch.Tensor:
    """float32 logits [S, V] of hidden [S, H] through the head (float [V, H] or ``Int8Weight``); an INT8 head
    past the kernel's rows a slice of ``INT8_HEAD_SLICE_ROWS`` at a time (the same logits, less memory)."""
    vocab = weight.shape[0]
    if not _int8_slices(weight, hidden.shape[0]) or vocab <= INT8_HEAD_SLICE_ROWS:
        return linear(hidden, weight).float()
    return torch.cat([linear(hidden, head_rows(weight, start, start + INT8_HEAD_SLICE_ROWS)).float()
                      for start in range(0, vocab, INT8_HEAD_SLICE_ROWS)], dim=1)


def head_slice_rows(rows: int, vocab: int, slice_bytes: int | None = None) -> int:
    """Vocabulary rows per slice of ``linear_greedy_argmax`` for ``rows`` hidden states (>= ``vocab``: one slice).

    About ``slice_bytes`` (default ``HEAD_SLICE_BYTES``; 0: one slice) of float32 logits, a multiple of
    ``BLOCK``, at least ``MIN_VOCAB`` (so each slice takes greedy_argmax's two passes).
    """
    slice_bytes = HEAD_SLICE_BYTES if slice_bytes is None else slice_bytes
    if slice_bytes <= 0:
        return vocab
    return max(MIN_VOCAB, slice_bytes // (4 * max(rows, 1)) // BLOCK * BLOCK)


def linear_greedy_argmax(hidden: torch.Tensor, weight: torch.Tensor, slice_rows: int | None = None) -> torch.Tensor:
    """``greedy_argmax(linear(hidden, weight).float())`` (= its ``argmax(dim=-1)``) without the [S, V] logits.

    hidden: [S, H]; weight: [V, H] (the lm_head, or its ``Int8Weight``), same dtype and device -> int64 [S].

    The vocabulary is taken ``slice_rows`` rows at a time (default ``head_slice_rows(S, V)``): each
    slice's logits ``linear(hidden, weight[slice])`` give each row's first maximum in the slice and its
    value, and the answer is the first slice whose value is the row's maximum. That is exactly the first
    maximum of the whole row (ties go to the lowest index; a NaN counts as the maximum, as in
    ``torch.argmax``), of logits that are ``linear``'s over the whole weight wherever ``linear`` computes
    an output column the same way whatever the other rows of the weight (the projections' CPU kernels
    and F.linear do: tests/model/test_greedy_argmax.py checks it on the model's shapes).
    """
    if hidden.dim() != 2 or len(weight.shape) != 2 or hidden.shape[1] != weight.shape[1]:
        raise ValueError(f"linear_greedy_argmax: hidden must be [S, H] and weight [V, H], got "
                         f"{tuple(hidden.shape)} and {tuple(weight.shape)}")
    rows, vocab = hidden.shape[0], weight.shape[0]
    step = slice_rows or head_slice_rows(rows, vocab)
    if _int8_slices(weight, rows):
        step = min(step, INT8_HEAD_SLICE_ROWS)
    if step >= vocab or rows == 0:
        return greedy_argmax(linear(hidden, weight).float())
    starts = range(0, vocab, step)
    values = torch.empty(rows, len(starts), dtype=torch.float32, device=hidden.device)
    indices = torch.empty(rows, len(starts), dtype=torch.int64, device=hidden.device)
    for j, start in enumerate(starts):
        logits = linear(hidden, head_rows(weight, start, start + step)).float()  # [S, <= step]: contiguous rows
        first = greedy_argmax(logits)
        values[:, j] = logits.gather(1, first[:, None])[:, 0]
        indices[:, j] = first + start
    # argmax over the slices: the first slice holding the row maximum (or its first NaN).
    return indices.gather(1, values.argmax(dim=-1, keepdim=True))[:, 0]
