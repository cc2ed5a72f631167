"""The gated delta rule's recurrence vectorised over sequences and heads: what the torch backend runs.

Same contract and semantics as ``reference_recurrent.py`` (the golden, kept as
the readable definition); this form is tested against it
(``tests/ops/test_vectorized_cpu_forms.py``) and against float64 loops through
the public op. Differences from the reference, all for speed:

* All N sequences advance together, one batched step per token position: no
  Python loop over sequences. Packed sequences of unequal length are padded to
  the longest; a padded position has g = 0 and beta = 0, which leaves the state
  exactly as it was (decay exp(0) = 1, delta-rule write of 0), so padding is
  exact, not approximate.
* One read of the state serves both products of a step: with the decay
  d = exp(g_t) and the state S before the step,

      S^T k_t (decayed)    = d * (S^T k_t)
      o_t = S_new^T q_t    = d * (S^T q_t) + (k_t . q_t) * correction

  so ``[k_t; q_t] @ S`` is a single batched matmul and S_new is written once in
  place (decay, then the rank-1 write). The reference reads the new state a
  second time for o_t; the two agree to float32 rounding, not bit for bit.

Bytes per decode step (T = 1): the state pool rows are gathered (read + write),
read by the matmul, updated in place (decay, then rank-1 write: two read + write
passes) and scattered back (read + write): 5 reads and 4 writes of N * Hv * Dk * Dv * 4 bytes, where
the floor is one read and one write.
"""
from __future__ import annotations

import torch

from .reference_recurrent import l2normalize

F32 = torch.float32


def _sequences_as_rows(x: torch.Tensor, gather: torch.Tensor | None, rows: int, length: int) -> torch.Tensor:
    """[B, T, ...] -> [N, L, ...]: batch rows as sequences, or packed tokens gathered by ``gather`` [N, L]."""
    if gather is None:
        return x
    flat = x[0]
    return flat[gather.reshape(-1)].reshape(rows, length, *flat.shape[1:])


def fused_recurrent_gated_delta_rule(*, q, k, v, g, beta, scale, initial_state, output_final_state, cu_seqlens,
                                     ssm_state_indices, has_initial_state, use_qk_l2norm_in_kernel):
    """Gated delta rule token by token in float32, all sequences and heads at once.

    Arguments, shapes and result as ``reference_recurrent.run_per_sequence``:
    q, k [B, T, Hk, Dk]; v [B, T, Hv, Dv]; g, beta [B, T, Hv]; initial_state
    float32 [N, Hv, Dk, Dv] or a pool [S, Hv, Dk, Dv] with ``ssm_state_indices``
    [N] (-1 = padding: zero outputs, zero final state, nothing written). Returns
    ``(o [B, T, Hv, Dv] in v's dtype, final_state float32 [N, Hv, Dk, Dv] or None)``.
    """
    batch, tokens, num_k_heads, dk = q.shape
    num_v_heads, dv = v.shape[2], v.shape[3]
    group = num_v_heads // num_k_heads
    device, out_dtype = v.device, v.dtype

    # Sequences as rows of [N, L]: gather indices and a mask of real tokens when packed.
    gather = real = None
    if cu_seqlens is None:
        n, length = batch, tokens
    else:
        starts = cu_seqlens[:-1].to(torch.int64)
        lengths = cu_seqlens[1:].to(torch.int64) - starts
        n = lengths.shape[0]
        length = int(lengths.max()) if n else 0
        position = torch.arange(length, device=device)
        real = position[None, :] < lengths[:, None]  # [N, L]
        gather = torch.where(real, starts[:, None] + position[None, :], 0)  # padded slots read token 0

    if use_qk_l2norm_in_kernel:
        q, k = l2normalize(q), l2normalize(k)
    q = _sequences_as_rows((q.to(F32) * scale).repeat_interleave(group, dim=2), gather, n, length)
    k = _sequences_as_rows(k.to(F32).repeat_interleave(group, dim=2), gather, n, length)
    v = _sequences_as_rows(v.to(F32), gather, n, length)
    g = _sequences_as_rows(g.to(F32), gather, n, length)
    beta = _sequences_as_rows(beta.to(F32), gather, n, length)
    if real is not None:  # padded positions: decay 1 and no write, so the state passes through unchanged
        g = g.masked_fill(~real[:, :, None], 0.0)
        beta = beta.masked_fill(~real[:, :, None], 0.0)

    # Initial states [N, Hv, Dk, Dv], zeroed (assigned, so a NaN in an unused row stays out) where fresh.
    valid = None
    if ssm_state_indices is not None:
        slots = ssm_state_indices.to(torch.int64)
        valid = slots >= 0
        fresh = ~valid if has_initial_state is None else ~(valid & has_initial_state.to(torch.bool))
        state = initial_state.index_select(0, slots.clamp(min=0))
        if bool(fresh.any()):  # a masked write is a full pass over the states even when nothing is selected
            state[fresh] = 0.0
    elif initial_state is not None:
        state = initial_state.clone(memory_format=torch.contiguous_format)  # the caller's is never modified
        if has_initial_state is not None and not bool(has_initial_state.all()):
            state[~has_initial_state.to(torch.bool)] = 0.0
    else:
        state = torch.zeros(n, num_v_heads, dk, dv, dtype=F32, device=device)

    o = torch.empty(n, length, num_v_heads, dv, dtype=F32, device=device)
    flat_state = state.view(n * num_v_heads, dk, dv)
    for t in range(length):
        k_t, q_t = k[:, t], q[:, t]  # [N, Hv, Dk]
        # [N * Hv, 2, Dk] @ [N * Hv, Dk, Dv]: one read of S for both products.
        products = torch.bmm(torch.stack([k_t, q_t], dim=2).view(-1, 2, dk), flat_state)
        products = products.view(n, num_v_heads, 2, dv)
        decay = torch.exp(g[:, t])[:, :, None]  # [N, Hv, 1]
        correction = beta[:, t][:, :, None] * (v[:, t] - decay * products[:, :, 0])
        o[:, t] = decay * products[:, :, 1] + (k_t * q_t).sum(-1, keepdim=True) * correction
        state.mul_(decay[..., None]).addcmul_(k_t[..., None], correction[..., None, :])  # rank-1 write

    if valid is not None:
        if bool(valid.all()):
            initial_state.index_copy_(0, slots, state)
        else:
            o[~valid] = 0.0
            state[~valid] = 0.0
            rows = valid.nonzero().squeeze(-1)
            initial_state.index_copy_(0, slots[rows], state[rows])

    if gather is None:
        out = o
    else:
        out = torch.zeros(1, tokens, num_v_heads, dv, dtype=F32, device=device)
        out[0, gather[real]] = o[real]
    final = state if output_final_state else None
    return out.to(out_dtype), final
