"""The prefill conv (``causal_conv1d_fn``) as K shifted multiply-adds over token tiles: what the torch backend runs.

Same contract and semantics as ``reference.causal_conv1d_fn`` (kept as the
readable definition); tested against it (``tests/ops/test_vectorized_cpu_forms.py``)
and against float64 loops through the public op. The reference loops over the
sequences and unfolds each one into a [L, C, K] temporary (805 MB for 8192
tokens of 6144 channels); this form never builds one:

* All packed tokens are convolved as if they were one sequence: output row t is
  ``bias + sum_k weight[:, k] * x[t - (K-1) + k]``, K in-place multiply-adds of
  contiguous row slices of x, a tile of ``TILE_ROWS`` tokens at a time so that
  x's rows and the tile's accumulator stay in cache (one read of x and one
  write of the output from memory, the op's floor).
* Only the first K-1 outputs of each sequence see inputs before its first
  token (its saved state or zeros, not the previous sequence's tokens): those
  N * (K-1) rows are recomputed from each sequence's extended inputs
  ``cat(left context, x_r)`` gathered for all sequences at once, and
  overwrite the tile pass's values. The new states are the last K-1 rows of
  the same extended inputs, gathered the same way.

Float32 sums in a different order from the reference's, so the two agree to
rounding (a few ulps), not bit for bit.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

F32 = torch.float32
I64 = torch.int64
TILE_ROWS = 64  # 64 tokens x 6144 channels x 4 bytes = 1.5 MiB of x per tile: the tile's passes stay in cache


def _extended_rows(x, left, starts, lengths, positions):
    """Rows ``positions`` [N, P] of each sequence's extended inputs ``cat(left[r], x_r)``: float32 [N, P, C].

    ``left`` float32 [N, K-1, C]; position p < K-1 is ``left[r, p]``, else
    token ``p - (K-1)`` of sequence r; positions past the sequence read zeros.
    """
    context = left.shape[1]
    from_left = positions < context
    token = positions - context
    inside = (token >= 0) & (token < lengths[:, None])
    index = (starts[:, None] + token).clamp(0, max(x.shape[0] - 1, 0))
    rows = x.index_select(0, index.reshape(-1)).view(*positions.shape, -1).to(F32) if x.shape[0] else \
        x.new_zeros(*positions.shape, x.shape[1], dtype=F32)
    rows = rows * inside[..., None]
    saved = left.gather(1, positions.clamp(max=context - 1)[..., None].expand(-1, -1, left.shape[2]))
    return torch.where(from_left[..., None], saved, rows)


def _tile_pass(x, taps, bias, out, activation):
    """out[t] = act(bias + sum_k taps[k] * x[t - (K-1) + k]) over all rows, rows before 0 read as zeros."""
    total = x.shape[0]
    context = taps.shape[0] - 1
    direct = out.dtype == F32
    for first in range(0, total, TILE_ROWS):
        last = min(first + TILE_ROWS, total)
        y = out[first:last] if direct else torch.empty(last - first, x.shape[1], dtype=F32, device=x.device)
        torch.mul(x[first:last], taps[context], out=y)
        if bias is not None:
            y.add_(bias)
        for shift in range(1, context + 1):  # tap K-1-shift reads the row `shift` tokens back
            begin = max(first - shift, 0)
            skipped = begin - (first - shift)  # rows of the tile whose input would be before row 0
            y[skipped:].addcmul_(x[begin:last - shift], taps[context - shift])
        if activation == "silu":
            F.silu(y, inplace=True)
        if not direct:
            out[first:last] = y.to(out.dtype)


def causal_conv1d_fn(*, x, weight, bias, conv_states, query_start_loc, cache_indices, has_initial_state,
                     activation):
    """x [T, C] with N sequences packed by query_start_loc [N+1]; conv_states [S, K-1, C] updated in place.

    Returns [T, C] in x's dtype. See ``reference.py`` for the meaning.
    """
    width = weight.shape[1]
    context = width - 1
    taps = weight.to(F32).t().contiguous()  # [K, C]: tap k's weights as one contiguous row
    bias32 = None if bias is None else bias.to(F32)
    source = x if x.dtype == F32 else x.to(F32)
    out = torch.empty_like(x)
    _tile_pass(source, taps, bias32, out, activation)

    starts = query_start_loc[:-1].to(I64)
    lengths = query_start_loc[1:].to(I64) - starts
    slots = cache_indices.to(I64)
    from_state = (slots >= 0) & has_initial_state.to(torch.bool)
    left = conv_states.index_select(0, slots.clamp(min=0)).to(F32) * from_state[:, None, None]  # [N, K-1, C]

    # The first K-1 outputs of every sequence, from its own left context: windows over extended rows 0 .. 2K-3.
    head = _extended_rows(source, left, starts, lengths, torch.arange(2 * context, device=x.device).expand(
        lengths.shape[0], -1))
    y = (head.unfold(1, width, 1)[:, :context] * taps.t()).sum(-1)  # [N, K-1, C]
    if bias32 is not None:
        y = y + bias32
    if activation == "silu":
        y = F.silu(y)
    row = torch.arange(context, device=x.device)
    real = row[None, :] < lengths[:, None]  # sequences shorter than K-1 have fewer such rows
    out[(starts[:, None] + row)[real]] = y[real].to(out.dtype)

    # New states: extended rows L .. L + K-2, i.e. the last K-1 inputs seen (older saved ones if L < K-1).
    written = slots >= 0
    if bool(written.any()):
        tail = _extended_rows(source, left, starts, lengths, lengths[:, None] + row)
        conv_states.index_copy_(0, slots[written], tail[written].to(conv_states.dtype))
    return out
