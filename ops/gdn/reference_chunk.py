"""Torch reference of the gated delta rule in chunked (WY) form, chunk size 64.

Contract (the same as ``reference_recurrent.py``, the golden): per sequence and value head,
state S [Dk, Dv] float32, for each token t

    S = S * exp(g_t);  S = S + outer(k_t, beta_t * (v_t - S^T k_t));  o_t = S^T (scale * q_t).

This file computes the same thing the way the Triton kernels do: the tokens
of a sequence are cut into chunks of C = 64 (the last one padded with
k = v = q = beta = g = 0, which adds nothing), everything inside a chunk is
matrix products, and only the state S is carried from chunk to chunk.

Algorithm, for one chunk with rows i, j = 0..C-1 and the state S entering it:

* ``gc_i = g_0 + ... + g_i``: cumulative log-decay inside the chunk.
* Unrolling the recurrence, the correction written at token i is
  ``delta_i = beta_i (v_i - exp(gc_i) S^T k_i - sum_{j<i} exp(gc_i - gc_j) (k_i.k_j) delta_j)``,
  i.e. ``(I + A) delta = beta V - (beta exp(gc) K) S`` with the strictly lower
  triangular ``A_ij = beta_i exp(gc_i - gc_j) k_i.k_j`` (j < i).
* ``T = (I + A)^-1`` is unit lower triangular, found by forward substitution
  (row i = e_i - A[i, :i] T[:i]), as the kernel does; no general inverse.
* ``w = T (beta exp(gc) K)`` and ``u = T (beta V)`` (the WY representation), so
  ``v_new = delta = u - w S``.
* ``o_i = scale (exp(gc_i) q_i^T S + sum_{j<=i} exp(gc_i - gc_j) (q_i.k_j) v_new_j)``;
  q carries the scale already.
* ``S_next = exp(gc_last) S + sum_j exp(gc_last - gc_j) k_j v_new_j^T``.

Decay factors are formed only for j <= i (masked to -inf before ``exp``), so
they never exceed 1 for a negative g and never overflow.
"""
from __future__ import annotations

import torch

from .reference_recurrent import run_per_sequence

CHUNK_SIZE = 64


def unit_lower_inverse(a: torch.Tensor) -> torch.Tensor:
    """``(I + a)^-1`` for strictly lower triangular ``a`` [..., C, C], by forward substitution.

    Row i of the inverse T solves ``T_i + sum_{j<i} a_ij T_j = e_i``; rows j < i
    have zeros beyond column j, so only the [:i, :i] block is involved.
    """
    size = a.shape[-1]
    inverse = torch.eye(size, dtype=a.dtype, device=a.device).expand(a.shape).clone()
    for i in range(1, size):
        inverse[..., i, :i] = -(a[..., i:i + 1, :i] @ inverse[..., :i, :i]).squeeze(-2)
    return inverse


def _to_chunks(x: torch.Tensor, num_chunks: int) -> torch.Tensor:
    """[L, H, ...] -> [num_chunks, H, C, ...], zero-padding the tail."""
    padded = x.new_zeros((num_chunks * CHUNK_SIZE,) + tuple(x.shape[1:]))
    padded[: x.shape[0]] = x
    chunks = padded.reshape((num_chunks, CHUNK_SIZE) + tuple(x.shape[1:]))
    return chunks.transpose(1, 2)


def chunked_sequence(q, k, v, g, beta, state):
    """The chunked form over one sequence, vectorised over chunks and value heads (a ``SequenceFn``)."""
    length = q.shape[0]
    num_chunks = -(-length // CHUNK_SIZE)
    q, k, v, g, beta = (_to_chunks(x, num_chunks) for x in (q, k, v, g, beta))  # [n, H, C, ...]

    gc = g.cumsum(dim=-1)  # [n, H, C]
    log_decay = gc[..., :, None] - gc[..., None, :]  # [n, H, C, C]: gc_i - gc_j
    rows = torch.arange(CHUNK_SIZE, device=q.device)
    causal = rows[:, None] >= rows[None, :]
    strictly_lower = rows[:, None] > rows[None, :]
    decay_causal = torch.exp(log_decay.masked_fill(~causal, float("-inf")))
    decay_strict = torch.exp(log_decay.masked_fill(~strictly_lower, float("-inf")))

    a = beta[..., :, None] * decay_strict * (k @ k.transpose(-1, -2))
    t = unit_lower_inverse(a)
    w = t @ ((beta * torch.exp(gc))[..., None] * k)  # [n, H, C, Dk]
    u = t @ (beta[..., None] * v)  # [n, H, C, Dv]

    q_decayed = q * torch.exp(gc)[..., None]
    attention = (q @ k.transpose(-1, -2)) * decay_causal  # [n, H, C, C]
    k_to_end = k * torch.exp(gc[..., -1:] - gc)[..., None]
    chunk_decay = torch.exp(gc[..., -1])[..., None, None]  # [n, H, 1, 1]

    o = torch.empty_like(v)
    for c in range(num_chunks):
        v_new = u[c] - w[c] @ state
        o[c] = q_decayed[c] @ state + attention[c] @ v_new
        state = chunk_decay[c] * state + k_to_end[c].transpose(-1, -2) @ v_new
    # [n, H, C, Dv] -> [L, H, Dv]
    return o.transpose(1, 2).reshape(-1, o.shape[1], o.shape[3])[:length], state


def chunk_gated_delta_rule(**op_arguments):
    """Gated delta rule in chunked form (chunk size 64), float32; equals ``reference_recurrent`` up to rounding.

    Arguments, shapes and result as ``run_per_sequence`` (in ``reference_recurrent.py``).
    """
    return run_per_sequence(chunked_sequence, **op_arguments)
