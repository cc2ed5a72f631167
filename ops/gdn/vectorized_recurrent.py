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

* The (sequence, value head) states are advanced in tiles of about 1 MiB
  through one reused buffer: gathered from the pool, run through all L
  tokens, written back. Within a tile the passes over the state (the matmul,
  the decay, the rank-1 write) hit the cache, so a decode step moves each pool
  row about once each way (the floor), and no fresh multi-megabyte tensor is
  allocated (their first-touch page faults cost more than the copies on a
  loaded machine). The Python loop runs over tiles (16 head states of
  128 x 128 each), not over sequences or heads.
"""
from __future__ import annotations

import torch

from .cpu_decode_kernel import decode_step
from .reference_recurrent import l2normalize

F32 = torch.float32
F32_BYTES = 4
# Head states are advanced a tile at a time through one reused buffer of this size, small enough to stay in a
# core's cache between the gather, the products, the update and the write-back, so the state crosses memory
# once each way (a loop over tiles of 16 head states of 128 x 128, not over sequences).
TILE_BYTES = 4 << 20


def _advance(state, q, k, v, g, beta, o):
    """Run L tokens over m head states in place: state [m, Dk, Dv]; q, k [m, L, Dk]; v [m, L, Dv]; g, beta [m, L].

    Writes o [m, L, Dv]. With the decay d = exp(g_t), one batched matmul of
    [k_t; q_t] with the state before the step gives both products (see the
    module docstring), then the state is decayed and gets its rank-1 write.
    """
    for t in range(q.shape[1]):
        k_t, q_t = k[:, t], q[:, t]
        products = torch.bmm(torch.stack([k_t, q_t], dim=1), state)  # [m, 2, Dv]
        decay = torch.exp(g[:, t])[:, None]  # [m, 1]
        correction = beta[:, t, None] * (v[:, t] - decay * products[:, 0])
        o[:, t] = decay * products[:, 1] + (k_t * q_t).sum(-1, keepdim=True) * correction
        state.mul_(decay[..., None]).addcmul_(k_t[:, :, None], correction[:, None, :])


def _sequences_as_rows(x: torch.Tensor, gather: torch.Tensor | None, rows: int, length: int) -> torch.Tensor:
    """[B, T, ...] -> [N, L, ...]: batch rows as sequences, or packed tokens gathered by ``gather`` [N, L]."""
    if gather is None:
        return x
    flat = x[0]
    return flat[gather.reshape(-1)].reshape(rows, length, *flat.shape[1:])


def fused_recurrent_gated_delta_rule(*, q, k, v, g, beta, scale, initial_state, output_final_state, cu_seqlens,
                                     ssm_state_indices, has_initial_state, use_qk_l2norm_in_kernel,
                                     num_accepted_tokens=None):
    """Gated delta rule token by token in float32, all sequences and heads at once.

    A decode step on a pool (one token per sequence) runs the C++ kernel of
    ``cpu_decode_kernel.py`` when the extension has it. The speculative-decoding
    form (``num_accepted_tokens`` with 2-D pool indices, one state row per token)
    is not vectorised here: it runs the reference.

    Arguments, shapes and result as ``reference_recurrent.run_per_sequence``:
    q, k [B, T, Hk, Dk]; v [B, T, Hv, Dv]; g, beta [B, T, Hv]; initial_state
    float32 [N, Hv, Dk, Dv] or a pool [S, Hv, Dk, Dv] with ``ssm_state_indices``
    [N] (-1 = padding: zero outputs, zero final state, nothing written). Returns
    ``(o [B, T, Hv, Dv] in v's dtype, final_state float32 [N, Hv, Dk, Dv] or None)``.
    """
    if num_accepted_tokens is not None:
        from .reference_recurrent import fused_recurrent_gated_delta_rule as reference

        return reference(q=q, k=k, v=v, g=g, beta=beta, scale=scale, initial_state=initial_state,
                         output_final_state=output_final_state, cu_seqlens=cu_seqlens,
                         ssm_state_indices=ssm_state_indices, has_initial_state=has_initial_state,
                         use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel, num_accepted_tokens=num_accepted_tokens)
    decoded = decode_step(q=q, k=k, v=v, g=g, beta=beta, scale=scale, initial_state=initial_state,
                          output_final_state=output_final_state, cu_seqlens=cu_seqlens,
                          ssm_state_indices=ssm_state_indices, has_initial_state=has_initial_state,
                          use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel)
    if decoded is not None:  # a decode step on a pool: the C++ kernel did it in place (cpu_decode_kernel.py)
        return decoded
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

    # Every (sequence, value head) state is a [Dk, Dv] matrix of its own: flatten them to "head rows" r = i * Hv + h.
    heads = n * num_v_heads
    q, k, v = (x.transpose(1, 2).reshape(heads, length, x.shape[-1]) for x in (q, k, v))  # [N*Hv, L, D]
    g, beta = (x.transpose(1, 2).reshape(heads, length) for x in (g, beta))  # [N*Hv, L]

    # Where each head row's initial state comes from, whether it starts from zeros, whether it is padding.
    head = torch.arange(num_v_heads, device=device)
    fresh = valid = source = None
    if ssm_state_indices is not None:
        slots = ssm_state_indices.to(torch.int64)
        starts = slots >= 0 if has_initial_state is None else (slots >= 0) & has_initial_state.to(torch.bool)
        valid = (slots >= 0).repeat_interleave(num_v_heads)
        fresh = ~starts.repeat_interleave(num_v_heads)
        pool = initial_state.view(-1, dk, dv)  # [S*Hv, Dk, Dv]; the op requires a contiguous pool
        source = (slots.clamp(min=0)[:, None] * num_v_heads + head).reshape(-1)
    elif initial_state is not None:
        pool = initial_state.reshape(-1, dk, dv)  # only read
        source = torch.arange(heads, device=device)
        if has_initial_state is not None:
            fresh = ~has_initial_state.to(torch.bool).repeat_interleave(num_v_heads)
    final = torch.zeros(heads, dk, dv, dtype=F32, device=device) if output_final_state else None

    o = torch.empty(heads, length, dv, dtype=F32, device=device)
    tile_rows = max(1, TILE_BYTES // (dk * dv * F32_BYTES))
    buffer = torch.empty(min(tile_rows, heads), dk, dv, dtype=F32, device=device)  # reused: stays in cache
    for first in range(0, heads, tile_rows):
        rows = slice(first, min(first + tile_rows, heads))
        state = buffer[: rows.stop - first]
        if source is None:
            state.zero_()
        else:
            torch.index_select(pool, 0, source[rows], out=state)
            if fresh is not None and bool(fresh[rows].any()):
                state[fresh[rows]] = 0.0
        _advance(state, q[rows], k[rows], v[rows], g[rows], beta[rows], o[rows])
        if valid is not None:
            keep = valid[rows]
            if bool(keep.all()):
                pool.index_copy_(0, source[rows], state)
            else:
                o[rows][~keep] = 0.0
                state[~keep] = 0.0
                pool.index_copy_(0, source[rows][keep], state[keep])
        if final is not None:
            final[rows] = state

    o = o.view(n, num_v_heads, length, dv).transpose(1, 2)  # [N, L, Hv, Dv]
    if final is not None:
        final = final.view(n, num_v_heads, dk, dv)

    if gather is None:
        out = o.contiguous()  # the reference's layout
    else:
        out = torch.zeros(1, tokens, num_v_heads, dv, dtype=F32, device=device)
        out[0, gather[real]] = o[real]
    return out.to(out_dtype), final
