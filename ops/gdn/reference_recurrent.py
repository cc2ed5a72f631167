"""Torch reference of the gated delta rule, token by token (the golden).

Per sequence and value head, with state S [Dk, Dv] in float32, for each token t:

    S   = S * exp(g_t)                              # decay
    S   = S + outer(k_t, beta_t * (v_t - S^T k_t))  # delta-rule write
    o_t = S^T (scale * q_t)                         # read

This file also holds ``run_per_sequence``, the driver shared with the chunked
reference (``reference_chunk.py``): it splits the batch or the packed tokens into
sequences, prepares float32 operands (l2norm, key heads repeated for value
heads, scale folded into q), picks each sequence's initial state (plain,
pool row, zeros, or padding) and writes final states back. The two references
differ only in the ``SequenceFn`` they pass to it.
"""
from __future__ import annotations

from typing import Callable, Optional

import torch

from .chunk_table import CHUNK

# (q [L, Hv, Dk], k [L, Hv, Dk], v [L, Hv, Dv], g [L, Hv], beta [L, Hv], state [Hv, Dk, Dv]) -> (o [L, Hv, Dv], state)
# All float32; q already carries the scale and the key heads are already repeated per value head.
SequenceFn = Callable[..., tuple[torch.Tensor, torch.Tensor]]

L2NORM_EPS = 1e-6


def l2normalize(x: torch.Tensor) -> torch.Tensor:
    """``x / sqrt(sum(x^2) + 1e-6)`` over the last dim, in float32."""
    x = x.to(torch.float32)
    return x * torch.rsqrt((x * x).sum(dim=-1, keepdim=True) + L2NORM_EPS)


def sequence_spans(batch: int, tokens: int, cu_seqlens: Optional[torch.Tensor]) -> list[tuple[int, int, int]]:
    """(batch row, first token, end token) of each of the N sequences."""
    if cu_seqlens is None:
        return [(b, 0, tokens) for b in range(batch)]
    offsets = cu_seqlens.tolist()
    return [(0, offsets[r], offsets[r + 1]) for r in range(len(offsets) - 1)]


def run_per_sequence(sequence_fn: SequenceFn, *, q, k, v, g, beta, scale, initial_state, output_final_state,
                     cu_seqlens, ssm_state_indices, has_initial_state, use_qk_l2norm_in_kernel,
                     num_accepted_tokens=None, checkpoint_boundaries=None):
    """Apply ``sequence_fn`` to each sequence with the right initial state; see the op's docstring.

    Keyword arguments are the public op's, validated by it: q, k [B, T, Hk, Dk];
    v [B, T, Hv, Dv]; g, beta [B, T, Hv]; states float32 [N, Hv, Dk, Dv], or a
    pool [S, Hv, Dk, Dv] with ``ssm_state_indices``. Sequence r starts from:
    ``initial_state[ssm_state_indices[r]]`` in pool mode, else
    ``initial_state[r]``; zeros where ``has_initial_state[r]`` is False or
    there is no ``initial_state``. Pool index -1 is padding: the sequence is
    skipped (outputs zeros, final state zeros, nothing written). In pool mode
    the final state of every other sequence is written back to its row in
    place; a plain ``initial_state`` is never modified.

    Speculative decoding (``num_accepted_tokens`` [N], ``ssm_state_indices``
    [N, W]): sequence r starts from pool row ``ssm_state_indices[r, a_r - 1]``
    (a_r = num_accepted_tokens[r]) and the state after its t-th token is
    written to ``ssm_state_indices[r, t]``; a row of all -1 is padding.

    Chunk-boundary checkpoints (``checkpoint_boundaries`` [P, 2], rows (sequence r, j)): the
    sequence is run in segments ending at the requested boundaries 64 * j (a chunked
    ``sequence_fn`` cuts each segment into the same 64-token chunks as the whole sequence, so
    the outputs are those of one run) and the state after each segment is returned.

    Returns ``(o [B, T, Hv, Dv] in v's dtype, final_state float32 [N, Hv, Dk, Dv] or None)``, and
    with ``checkpoint_boundaries`` a third item, the states float32 [P, Hv, Dk, Dv] in its row order.
    """
    batch, tokens, num_k_heads, dk = q.shape
    num_v_heads, dv = v.shape[2], v.shape[3]
    out_dtype = v.dtype
    group = num_v_heads // num_k_heads

    if use_qk_l2norm_in_kernel:
        q, k = l2normalize(q), l2normalize(k)
    # Value head h reads key head h // group: repeat each key head group times, consecutively.
    q = (q.to(torch.float32) * scale).repeat_interleave(group, dim=2)
    k = k.to(torch.float32).repeat_interleave(group, dim=2)
    v, g, beta = v.to(torch.float32), g.to(torch.float32), beta.to(torch.float32)

    spans = sequence_spans(batch, tokens, cu_seqlens)
    slots = None if ssm_state_indices is None else ssm_state_indices.tolist()
    per_token = None  # speculative decoding: the pool row of each token's state
    if num_accepted_tokens is not None:
        per_token = slots
        slots = [-1 if all(s < 0 for s in row) else row[a - 1]
                 for row, a in zip(per_token, num_accepted_tokens.tolist())]
    starts_from_state = None if has_initial_state is None else has_initial_state.tolist()

    o = torch.zeros(batch, tokens, num_v_heads, dv, dtype=torch.float32, device=v.device)
    final = (torch.zeros(len(spans), num_v_heads, dk, dv, dtype=torch.float32, device=v.device)
             if output_final_state else None)
    cuts: dict[int, list[tuple[int, int]]] = {}  # sequence -> (end token of a segment, checkpoint row)
    checkpoints = None
    if checkpoint_boundaries is not None:
        checkpoints = torch.zeros(checkpoint_boundaries.shape[0], num_v_heads, dk, dv, dtype=torch.float32,
                                  device=v.device)
        for p, (r, j) in enumerate(checkpoint_boundaries.tolist()):
            cuts.setdefault(r, []).append((spans[r][1] + CHUNK * j, p))
    for r, (b, start, end) in enumerate(spans):
        row = r if slots is None else slots[r]
        if row < 0:
            continue  # padding
        if initial_state is not None and (starts_from_state is None or starts_from_state[r]):
            state = initial_state[row].clone()
        else:
            state = torch.zeros(num_v_heads, dk, dv, dtype=torch.float32, device=v.device)
        if per_token is not None:
            # One token at a time, keeping the state after each in its own pool row.
            for t in range(start, end):
                o[b, t:t + 1], state = sequence_fn(q[b, t:t + 1], k[b, t:t + 1], v[b, t:t + 1],
                                                   g[b, t:t + 1], beta[b, t:t + 1], state)
                initial_state[per_token[r][t - start]] = state
        elif end > start:
            first = start
            for cut, p in sorted(cuts.get(r, ())) + [(end, None)]:
                if cut > first:
                    o[b, first:cut], state = sequence_fn(q[b, first:cut], k[b, first:cut], v[b, first:cut],
                                                         g[b, first:cut], beta[b, first:cut], state)
                    first = cut
                if p is not None:
                    checkpoints[p] = state
        if slots is not None and per_token is None:
            initial_state[row] = state
        if final is not None:
            final[r] = state
    if checkpoints is not None:
        return o.to(out_dtype), final, checkpoints
    return o.to(out_dtype), final


def recurrent_sequence(q, k, v, g, beta, state):
    """The recurrence over one sequence, token by token, vectorised over value heads (a ``SequenceFn``)."""
    o = torch.empty_like(v)
    for t in range(q.shape[0]):
        state = state * torch.exp(g[t])[:, None, None]
        predicted = torch.einsum("hkv,hk->hv", state, k[t])
        correction = beta[t][:, None] * (v[t] - predicted)
        state = state + k[t][:, :, None] * correction[:, None, :]
        o[t] = torch.einsum("hkv,hk->hv", state, q[t])
    return o, state


def fused_recurrent_gated_delta_rule(**op_arguments):
    """Gated delta rule token by token in float32: the golden reference.

    Arguments, shapes and result as ``run_per_sequence``.
    """
    return run_per_sequence(recurrent_sequence, **op_arguments)
