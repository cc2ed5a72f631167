"""The chunked (WY) gated delta rule in groups of chunks with a triangular solve: what the torch backend runs.

Same contract and algorithm as ``reference_chunk.py`` (kept as the readable
definition; see its docstring for the algebra), tested against it
(``tests/ops/test_vectorized_cpu_forms.py``) and, through the public op,
against the recurrent golden. Differences, all for speed:

* ``(I + A)^-1`` is never formed: ``w = T (beta e^gc K)`` and ``u = T (beta V)``
  are one ``torch.linalg.solve_triangular`` of the unit lower triangular
  ``I + A`` against ``[beta e^gc K | beta V]`` (a blocked LAPACK forward
  substitution), instead of C - 1 = 63 sliced matmul steps over every chunk.
* One decay matrix per chunk: ``exp(gc_i - gc_j)`` masked to j <= i serves
  both the intra-chunk attention and, times beta with its diagonal replaced
  by ones, ``I + A`` itself.
* The chunk-local products run ``GROUP_CHUNKS`` chunks at a time so that
  their [chunks, H, C, C] and [chunks, H, C, D] temporaries stay in cache
  instead of being materialised for the whole sequence (tens of MB each, first
  touch included); the state is then carried through the group's chunks with
  fused ``baddbmm`` products.

Float32 throughout; sums and the solve in a different order from the
reference's, so the two agree to rounding, not bit for bit.
"""
from __future__ import annotations

import torch

from .reference_chunk import CHUNK_SIZE, _to_chunks
from .reference_recurrent import run_per_sequence

GROUP_CHUNKS = 8  # 8 chunks x 16 heads x 64 x (64 + 2 * 128) x 4 bytes ~ 10 MiB of chunk-local temporaries


def _advance_group(q, k, v, g, beta, state, o):
    """Chunks q, k [p, H, C, Dk], v [p, H, C, Dv], g, beta [p, H, C] from ``state`` [H, Dk, Dv]; writes o [p, H, C, Dv].

    Returns the state after the last chunk.
    """
    dk = k.shape[-1]
    gc = g.cumsum(dim=-1)  # [p, H, C]
    rows = torch.arange(CHUNK_SIZE, device=q.device)
    after = rows[None, :] > rows[:, None]  # key j after query row i: never seen
    decay = (gc[..., :, None] - gc[..., None, :]).masked_fill_(after, float("-inf")).exp_()  # [p, H, C, C]
    attention = torch.matmul(q, k.transpose(-1, -2)).mul_(decay)
    system = torch.matmul(k, k.transpose(-1, -2)).mul_(decay).mul_(beta[..., :, None])
    system.diagonal(dim1=-2, dim2=-1).fill_(1.0)  # I + A, A strictly lower
    rhs = torch.cat([(beta * torch.exp(gc))[..., None] * k, beta[..., None] * v], dim=-1)
    solved = torch.linalg.solve_triangular(system, rhs, upper=False, unitriangular=True)
    w, u = solved[..., :dk], solved[..., dk:]
    q_decayed = q * torch.exp(gc)[..., None]
    k_to_end = k * torch.exp(gc[..., -1:] - gc)[..., None]
    chunk_decay = torch.exp(gc[..., -1])[..., None, None]  # [p, H, 1, 1]
    for c in range(q.shape[0]):
        v_new = torch.baddbmm(u[c], w[c], state, alpha=-1.0)  # u - w S
        torch.baddbmm(torch.bmm(attention[c], v_new), q_decayed[c], state, out=o[c])
        state = torch.baddbmm(chunk_decay[c] * state, k_to_end[c].transpose(-1, -2), v_new)
    return state


def chunked_sequence(q, k, v, g, beta, state):
    """The chunked form over one sequence (a ``SequenceFn``): q, k [L, H, Dk]; v [L, H, Dv]; g, beta [L, H]."""
    length = q.shape[0]
    num_chunks = -(-length // CHUNK_SIZE)
    q, k, v, g, beta = (_to_chunks(x, num_chunks).contiguous() for x in (q, k, v, g, beta))  # [n, H, C, ...]
    o = torch.empty_like(v)
    for first in range(0, num_chunks, GROUP_CHUNKS):
        group = slice(first, min(first + GROUP_CHUNKS, num_chunks))
        state = _advance_group(q[group], k[group], v[group], g[group], beta[group], state, o[group])
    # [n, H, C, Dv] -> [L, H, Dv]
    return o.transpose(1, 2).reshape(-1, o.shape[1], o.shape[3])[:length], state


def chunk_gated_delta_rule(**op_arguments):
    """Gated delta rule in chunked form (chunk size 64), float32; equals ``reference_chunk`` up to rounding.

    Arguments, shapes and result as ``run_per_sequence`` (in ``reference_recurrent.py``).
    """
    return run_per_sequence(chunked_sequence, **op_arguments)
