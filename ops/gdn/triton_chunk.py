"""Triton ``chunk_gated_delta_rule``: the delta rule over chunks of 64 tokens.

The algorithm is the one of ``ops/gdn/reference_chunk.py``. Within a chunk of L <= 64
tokens of one (sequence, value head), with ``G`` the inclusive cumulative sum
of g and ``Gam = exp(G)``:

* ``A[i, j] = beta_i (k_i . k_j) exp(G_i - G_j)`` for j < i (else 0), and
  ``Tinv = (I + A)^-1``, unit lower triangular;
* ``w = Tinv (beta Gam k)`` [L, Dk] and ``u = Tinv (beta v)`` [L, Dv];
* from the state S at the chunk start: ``v_new = u - w S``,
  ``o = scale (Gam q) S + Aqk v_new`` with
  ``Aqk[i, j] = scale (q_i . k_j) exp(G_i - G_j)`` for j <= i,
  and the next state ``exp(G_L) S + (exp(G_L - G) k)^T v_new``.

Two launches, each on a persistent grid:

1. ``_chunk_prep_kernel``, one item per (chunk, value head), all in
   parallel: G, A and Aqk (tiled over Dk), the inverse, then w and u (tiled
   over Dk and Dv), written to float32 workspaces.
2. ``_chunk_state_kernel``, one item per (sequence, value head, Dv block):
   walks the sequence's chunks in order with S [Dk, BLOCK_V] in registers,
   producing that chunk's outputs and the next state. Outputs are computed
   here rather than in a third launch so no per-chunk state has to be stored
   (for 8k tokens, 32 heads and 128 x 128 states that would be 268 MB).

The inverse of the 64 x 64 unit lower triangular matrix works on the whole
tile with masks (Triton cannot slice a register tile): first the four 16 x 16
diagonal blocks by forward substitution, one row of every block per step (16
steps), then block forward substitution for the blocks below the diagonal,
one block row at a time with two 64 x 64 ``tl.dot`` (3 steps).

All dots take float32 operands with ``input_precision="ieee"`` (no TF32 on
CUDA), so the result follows the float32 reference to float32 rounding.

Ascend UB, bytes per buffer (float32 tiles, fixed config BLOCK_K = 64, BLOCK_V = 32):
* prep: A, Aqk and Tinv 64 x 64 (16 KiB each) plus the q and k blocks
  64 x BLOCK_K (16 KiB each) and a 64 x 64 temporary of the inverse:
  about 96 KiB at its peak, the limit of a double-buffered 192 KiB UB.
* state: S Dk x BLOCK_V (16 KiB for Dk = 128), one 64 x Dk tile of w, q or k
  live at a time (32 KiB for Dk = 128), Aqk (16 KiB) and three 64 x BLOCK_V
  tiles (u, v_new, o: 24 KiB): about 88 KiB for Dk = 128. Dk = 256 doubles
  the w/q/k tile (64 KiB), so the fixed config halves BLOCK_V to 16 there:
  16 + 64 + 16 + 12 = 108 KiB, still over 96 KiB: Dk = 256 on Ascend needs the
  Dk-wide tiles split (not done; Qwen3.5's GDN has Dk = 128).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from .._triton import and_flag, configured
from .chunk_table import CHUNK, prepare_chunk_indices
from .triton_common import L2NORM_EPS, l2_normalize_rows, prepare_launch, tile
SUB = 16  # diagonal block size of the inverse: the smallest tl.dot dimension


@triton.jit
def _unit_lower_inverse(a, BT: tl.constexpr, SUB: tl.constexpr):
    """``(I + a)^-1`` for a strictly lower triangular float32 [BT, BT] tile ``a``."""
    i = tl.arange(0, BT)[:, None]
    j = tl.arange(0, BT)[None, :]
    same_block = (i // SUB) == (j // SUB)
    eye = tl.where(i == j, 1.0, 0.0)
    diag = tl.where(same_block, a, 0.0)
    inv = eye
    # Diagonal blocks: row r of each block is e_r - sum_{c<r} diag[r, c] inv[c, :].
    # Blocks occupy disjoint columns, so the four rows r, 16 + r, ... fold
    # into one vector (reduce over rows) and their products with the
    # block-diagonal inverse into another (reduce over columns) without mixing.
    for r in tl.static_range(1, SUB):
        row_r = (i % SUB) == r
        coeffs = tl.sum(tl.where(row_r, diag, 0.0), axis=0)
        combined = tl.sum(coeffs[:, None] * inv, axis=0)
        inv = tl.where(row_r & same_block, eye - combined[None, :], inv)
    # Below the diagonal, block row b: inv[b, :b] = -inv[b, b] (a[b, :b] inv[:b, :b]).
    diag_inv = inv
    for b in tl.static_range(1, BT // SUB):
        below = ((i // SUB) == b) & (j < b * SUB)
        partial = tl.dot(tl.where(below, a, 0.0), inv, input_precision="ieee")
        inv = tl.where(below, -tl.dot(diag_inv, partial, input_precision="ieee"), inv)
    return inv


def _prep_fixed(**_shape) -> dict:
    # 64-wide Dk/Dv blocks: the 64 x 64 tiles bound the UB use (module doc).
    return {"BLOCK_K": 64, "BLOCK_V": 64}


@configured(
    fixed=_prep_fixed,
    cuda_configs=[{"BLOCK_K": bk, "BLOCK_V": bv, "num_warps": w} for bk in (32, 64) for bv in (32, 64) for w in (4, 8)],
    key=["HV", "DK", "DV"],
)
@triton.jit
def _chunk_prep_kernel(
    q, k, v, g, beta, chunks, gcum_ws, aqk_ws, w_ws, u_ws,
    scale, n_chunks,
    stride_q_t, stride_q_h, stride_k_t, stride_k_h, stride_v_t, stride_v_h, stride_g_t, stride_b_t,
    HK: tl.constexpr, HV: tl.constexpr, DK: tl.constexpr, DV: tl.constexpr,
    BT: tl.constexpr, SUB: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_V: tl.constexpr,
    L2NORM: tl.constexpr, EPS: tl.constexpr,
):
    rows = tl.arange(0, BT)
    i = rows[:, None]
    j = rows[None, :]
    for item in tl.range(tl.program_id(0), n_chunks * HV, tl.num_programs(0)):
        chunk = item // HV
        head = item % HV
        key_head = head // (HV // HK)
        start = tl.load(chunks + 2 * chunk).to(tl.int64)
        length = tl.load(chunks + 2 * chunk + 1) - tl.load(chunks + 2 * chunk)
        row_ok = rows < length
        tok = start + rows  # int64 token index of each row
        g_row = tl.load(g + tok * stride_g_t + head, mask=row_ok, other=0.0).to(tl.float32)
        beta_row = tl.load(beta + tok * stride_b_t + head, mask=row_ok, other=0.0).to(tl.float32)
        gcum = tl.cumsum(g_row, axis=0)
        # K K^T and Q K^T over Dk blocks, with the squared row norms for the l2norm.
        kk = tl.zeros([BT, BT], dtype=tl.float32)
        qk = tl.zeros([BT, BT], dtype=tl.float32)
        k_sq = tl.zeros([BT], dtype=tl.float32)
        q_sq = tl.zeros([BT], dtype=tl.float32)
        for k0 in tl.static_range(0, DK, BLOCK_K):
            cols = k0 + tl.arange(0, BLOCK_K)
            ok = row_ok[:, None] & (cols < DK)[None, :]
            k_blk = tl.load(k + tok[:, None] * stride_k_t + key_head * stride_k_h + cols[None, :], mask=ok,
                            other=0.0).to(tl.float32)
            q_blk = tl.load(q + tok[:, None] * stride_q_t + key_head * stride_q_h + cols[None, :], mask=ok,
                            other=0.0).to(tl.float32)
            kk += tl.dot(k_blk, tl.trans(k_blk), input_precision="ieee")
            qk += tl.dot(q_blk, tl.trans(k_blk), input_precision="ieee")
            k_sq += tl.sum(k_blk * k_blk, axis=1)
            q_sq += tl.sum(q_blk * q_blk, axis=1)
        k_inv_norm = tl.full([BT], 1.0, tl.float32)
        if L2NORM:
            k_inv_norm = 1.0 / tl.sqrt(k_sq + EPS)
            q_inv_norm = 1.0 / tl.sqrt(q_sq + EPS)
            kk = kk * k_inv_norm[:, None] * k_inv_norm[None, :]
            qk = qk * q_inv_norm[:, None] * k_inv_norm[None, :]
        # exp(G_i - G_j) only where j <= i: above the diagonal it could overflow.
        decay = tl.exp(tl.where(j <= i, gcum[:, None] - gcum[None, :], 0.0))
        a = tl.where(j < i, kk * decay * beta_row[:, None], 0.0)
        aqk = tl.where(j <= i, qk * decay * scale, 0.0)
        inv = _unit_lower_inverse(a, BT, SUB)
        tl.store(gcum_ws + tok * HV + head, gcum, mask=row_ok)
        tl.store(aqk_ws + (tok * HV + head)[:, None] * BT + j, aqk, mask=row_ok[:, None])
        # w = Tinv (beta Gam k) and u = Tinv (beta v), block by block.
        k_weight = beta_row * tl.exp(gcum) * k_inv_norm
        for k0 in tl.static_range(0, DK, BLOCK_K):
            cols = k0 + tl.arange(0, BLOCK_K)
            ok = row_ok[:, None] & (cols < DK)[None, :]
            k_blk = tl.load(k + tok[:, None] * stride_k_t + key_head * stride_k_h + cols[None, :], mask=ok,
                            other=0.0).to(tl.float32)
            w_blk = tl.dot(inv, k_blk * k_weight[:, None], input_precision="ieee")
            tl.store(w_ws + (tok * HV + head)[:, None] * DK + cols[None, :], w_blk, mask=ok)
        for v0 in tl.static_range(0, DV, BLOCK_V):
            cols = v0 + tl.arange(0, BLOCK_V)
            ok = row_ok[:, None] & (cols < DV)[None, :]
            v_blk = tl.load(v + tok[:, None] * stride_v_t + head * stride_v_h + cols[None, :], mask=ok,
                            other=0.0).to(tl.float32)
            u_blk = tl.dot(inv, v_blk * beta_row[:, None], input_precision="ieee")
            tl.store(u_ws + (tok * HV + head)[:, None] * DV + cols[None, :], u_blk, mask=ok)


def _state_fixed(*, dk: int) -> dict:
    # 32 value columns keep S and the Dk-wide tiles within the UB for Dk <= 128;
    # Dk = 256 doubles those tiles, so S narrows to 16 columns (module doc).
    return {"BLOCK_V": 32 if dk <= 128 else 16}


@configured(
    fixed=_state_fixed,
    cuda_configs=[{"BLOCK_V": bv, "num_warps": w} for bv in (16, 32, 64) for w in (4, 8)],
    key=["HV", "DK", "DV"],
    restore_value=["state_in"],
)
@triton.jit
def _chunk_state_kernel(
    q, k, o, chunks, seq_chunks, gcum_ws, aqk_ws, w_ws, u_ws, state_in, final, read_rows, write_rows,
    scale, n_seqs,
    stride_q_t, stride_q_h, stride_k_t, stride_k_h,
    HK: tl.constexpr, HV: tl.constexpr, DK: tl.constexpr, DV: tl.constexpr,
    BT: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_V: tl.constexpr,
    L2NORM: tl.constexpr, POOL: tl.constexpr, STORE_FINAL: tl.constexpr, EPS: tl.constexpr,
):
    n_vblocks: tl.constexpr = (DV + BLOCK_V - 1) // BLOCK_V
    rows = tl.arange(0, BT)
    dk = tl.arange(0, BLOCK_K)
    k_ok = dk < DK
    for item in tl.range(tl.program_id(0), n_seqs * HV * n_vblocks, tl.num_programs(0)):
        seq = item // (HV * n_vblocks)
        head = (item // n_vblocks) % HV
        key_head = head // (HV // HK)
        dv = (item % n_vblocks) * BLOCK_V + tl.arange(0, BLOCK_V)
        v_ok = dv < DV
        tile_ok = k_ok[:, None] & v_ok[None, :]
        in_row = head * (DK * DV) + dk[:, None] * DV + dv[None, :]
        write_row = tl.load(write_rows + seq).to(tl.int64)
        if write_row >= 0:  # a pool row of -1 is padding: skip the sequence
            read_row = tl.load(read_rows + seq).to(tl.int64)
            state = tl.load(state_in + read_row * (HV * DK * DV) + in_row, mask=and_flag(tile_ok, read_row >= 0),
                            other=0.0)
            for chunk in tl.range(tl.load(seq_chunks + seq), tl.load(seq_chunks + seq + 1)):
                start = tl.load(chunks + 2 * chunk).to(tl.int64)
                length = tl.load(chunks + 2 * chunk + 1) - tl.load(chunks + 2 * chunk)
                row_ok = rows < length
                tok = start + rows
                ws_row = tok * HV + head
                kt_ok = row_ok[:, None] & k_ok[None, :]
                vt_ok = row_ok[:, None] & v_ok[None, :]
                gcum = tl.load(gcum_ws + ws_row, mask=row_ok, other=0.0)
                g_last = tl.load(gcum_ws + (start + length - 1) * HV + head)
                # v_new = u - w S: the values corrected by what the state already predicts.
                w_t = tl.load(w_ws + ws_row[:, None] * DK + dk[None, :], mask=kt_ok, other=0.0)
                u_t = tl.load(u_ws + ws_row[:, None] * DV + dv[None, :], mask=vt_ok, other=0.0)
                v_new = u_t - tl.dot(w_t, state, input_precision="ieee")
                # Outputs: the decayed state read by q, plus the in-chunk attention.
                q_t = tl.load(q + tok[:, None] * stride_q_t + key_head * stride_q_h + dk[None, :], mask=kt_ok,
                              other=0.0).to(tl.float32)
                if L2NORM:
                    q_t = l2_normalize_rows(q_t, EPS)
                aqk = tl.load(aqk_ws + ws_row[:, None] * BT + rows[None, :], mask=row_ok[:, None], other=0.0)
                o_t = tl.dot(q_t * (scale * tl.exp(gcum))[:, None], state, input_precision="ieee")
                o_t += tl.dot(aqk, v_new, input_precision="ieee")
                tl.store(o + ws_row[:, None] * DV + dv[None, :], o_t.to(o.dtype.element_ty), mask=vt_ok)
                # Next state: decay to the chunk end, add the chunk's corrected writes.
                k_t = tl.load(k + tok[:, None] * stride_k_t + key_head * stride_k_h + dk[None, :], mask=kt_ok,
                              other=0.0).to(tl.float32)
                if L2NORM:
                    k_t = l2_normalize_rows(k_t, EPS)
                k_t = k_t * tl.where(row_ok, tl.exp(g_last - gcum), 0.0)[:, None]
                state = state * tl.exp(g_last) + tl.dot(tl.trans(k_t), v_new, input_precision="ieee")
            if POOL:
                tl.store(state_in + write_row * (HV * DK * DV) + in_row, state, mask=tile_ok)
            if STORE_FINAL:
                tl.store(final + tl.cast(seq, tl.int64) * (HV * DK * DV) + in_row, state, mask=tile_ok)


def chunk_gated_delta_rule(*, q, k, v, g, beta, scale, initial_state, output_final_state, cu_seqlens,
                           ssm_state_indices, has_initial_state, use_qk_l2norm_in_kernel, chunk_indices=None,
                           chunk_offsets=None):
    """Triton ``chunk_gated_delta_rule``; arguments as validated by ``ops/gdn/op.py``.

    q, k [B, T, Hk, Dk]; v [B, T, Hv, Dv]; g float32 and beta [B, T, Hv];
    states float32 [N, Hv, Dk, Dv] or a pool [S, Hv, Dk, Dv] (updated in place
    at ``ssm_state_indices``). Returns (o [B, T, Hv, Dv] in v's dtype,
    final states float32 [N, Hv, Dk, Dv] or None). ``chunk_indices``/``chunk_offsets``:
    the step's ``prepare_chunk_indices`` (built here when not given, a host read on a device).
    """
    hk, dk = q.shape[2], q.shape[3]
    hv, dv = v.shape[2], v.shape[3]
    rows, plan, o = prepare_launch(q, k, v, g, beta, cu_seqlens=cu_seqlens, initial_state=initial_state,
                                   ssm_state_indices=ssm_state_indices, has_initial_state=has_initial_state,
                                   output_final_state=output_final_state)
    n = rows.n_seqs
    if n == 0 or hv == 0:
        return o.view(v.shape), plan.final
    if chunk_indices is None:
        chunk_indices, chunk_offsets = prepare_chunk_indices(rows.cu)
    chunks, seq_chunks, n_chunks = chunk_indices, chunk_offsets, chunk_indices.shape[0]
    total = rows.v.shape[0]
    f32 = dict(dtype=torch.float32, device=q.device)
    gcum_ws = torch.empty((total, hv), **f32)
    aqk_ws = torch.empty((total, hv, CHUNK), **f32)
    w_ws = torch.empty((total, hv, dk), **f32)
    u_ws = torch.empty((total, hv, dv), **f32)
    strides = (rows.q.stride(0), rows.q.stride(1), rows.k.stride(0), rows.k.stride(1))
    heads = dict(HK=hk, HV=hv, DK=dk, DV=dv, BT=CHUNK, L2NORM=bool(use_qk_l2norm_in_kernel), EPS=L2NORM_EPS)
    if n_chunks > 0:
        _chunk_prep_kernel.launch(
            q.device, n_chunks * hv,
            rows.q, rows.k, rows.v, rows.g, rows.beta, chunks, gcum_ws, aqk_ws, w_ws, u_ws,
            float(scale), n_chunks,
            *strides, rows.v.stride(0), rows.v.stride(1), rows.g.stride(0), rows.beta.stride(0),
            SUB=SUB, **heads,
        )
    _chunk_state_kernel.launch(
        q.device, n * hv * triton.cdiv(dv, 16),
        rows.q, rows.k, o, chunks, seq_chunks, gcum_ws, aqk_ws, w_ws, u_ws, plan.state_in, plan.final_arg,
        plan.read_rows, plan.write_rows,
        float(scale), n, *strides, shape={"dk": dk},
        BLOCK_K=tile(dk), POOL=plan.pool, STORE_FINAL=plan.final is not None, **heads,
    )
    return o.view(v.shape), plan.final
