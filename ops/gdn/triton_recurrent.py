"""Triton ``fused_recurrent_gated_delta_rule``: the delta rule token by token.

This is the decode update: one program step owns the state tile
S[:, v-block] of one (sequence, value head), keeps it in registers while it
walks the sequence's tokens, and stores it once at the end (into the pool row
in place, and/or into the returned final states). Per token, in float32:
``S *= exp(g)``; ``S += k (beta (v - S^T k))^T``; ``o = S^T (scale q)``.

Reading and writing the pool row happen in the same program on the same tile
(each stored element depends on the element loaded from that address), and
pool rows are unique per call, so the in-place update needs no barrier.
Speculative decoding (``EACH_TOKEN``) stores the tile after every token into
that token's pool row instead; the tile is loaded once before the first of
those stores, so the same argument holds.

Ascend UB, bytes per buffer: the state tile BLOCK_K * BLOCK_V * 4 plus the q
and k vectors (BLOCK_K * 4 each) and v/o (BLOCK_V * 4 each). With Dk = 128 and
the fixed BLOCK_V = 32: 16 KiB + 1 KiB + 256 B; with Dk = 256, 32 KiB + 2 KiB.
"""
from __future__ import annotations

import triton
import triton.language as tl

from .._triton import and_flag, configured
from .triton_common import L2NORM_EPS, prepare_launch, tile


def _fixed(**_shape) -> dict:
    # 32 value columns: the state tile stays <= 32 KiB for Dk <= 256 (module doc),
    # and Dv = 64 in the tests gives two v-blocks per head.
    return {"BLOCK_V": 32}


@configured(
    fixed=_fixed,
    cuda_configs=[{"BLOCK_V": bv, "num_warps": w} for bv in (16, 32, 64) for w in (1, 2, 4)],
    key=["HV", "DK", "DV"],
    restore_value=["state_in"],
)
@triton.jit
def _recurrent_kernel(
    q, k, v, g, beta, o, state_in, final, cu, read_rows, write_rows, token_rows,
    scale, n_seqs, token_rows_width,
    stride_q_t, stride_q_h, stride_k_t, stride_k_h, stride_v_t, stride_v_h, stride_g_t, stride_b_t,
    HK: tl.constexpr, HV: tl.constexpr, DK: tl.constexpr, DV: tl.constexpr,
    BLOCK_K: tl.constexpr, BLOCK_V: tl.constexpr,
    L2NORM: tl.constexpr, POOL: tl.constexpr, STORE_FINAL: tl.constexpr, EPS: tl.constexpr,
    EACH_TOKEN: tl.constexpr,
):
    n_vblocks: tl.constexpr = (DV + BLOCK_V - 1) // BLOCK_V
    dk = tl.arange(0, BLOCK_K)
    dv_in_block = tl.arange(0, BLOCK_V)
    for item in tl.range(tl.program_id(0), n_seqs * HV * n_vblocks, tl.num_programs(0)):
        seq = item // (HV * n_vblocks)
        head = (item // n_vblocks) % HV
        key_head = head // (HV // HK)
        dv = (item % n_vblocks) * BLOCK_V + dv_in_block
        k_ok = dk < DK
        v_ok = dv < DV
        tile_ok = k_ok[:, None] & v_ok[None, :]
        # Offset of this head's [Dk, Dv] state inside one state row.
        in_row = head * (DK * DV) + dk[:, None] * DV + dv[None, :]
        write_row = tl.load(write_rows + seq).to(tl.int64)
        if write_row >= 0:  # a pool row of -1 is padding: skip the sequence
            read_row = tl.load(read_rows + seq).to(tl.int64)
            state = tl.load(state_in + read_row * (HV * DK * DV) + in_row, mask=and_flag(tile_ok, read_row >= 0),
                            other=0.0)
            bos = tl.load(cu + seq).to(tl.int64)
            eos = tl.load(cu + seq + 1).to(tl.int64)
            for t in tl.range(bos, eos):
                q_t = tl.load(q + t * stride_q_t + key_head * stride_q_h + dk, mask=k_ok, other=0.0).to(tl.float32)
                k_t = tl.load(k + t * stride_k_t + key_head * stride_k_h + dk, mask=k_ok, other=0.0).to(tl.float32)
                v_t = tl.load(v + t * stride_v_t + head * stride_v_h + dv, mask=v_ok, other=0.0).to(tl.float32)
                g_t = tl.load(g + t * stride_g_t + head).to(tl.float32)
                beta_t = tl.load(beta + t * stride_b_t + head).to(tl.float32)
                if L2NORM:
                    q_t = q_t / tl.sqrt(tl.sum(q_t * q_t) + EPS)
                    k_t = k_t / tl.sqrt(tl.sum(k_t * k_t) + EPS)
                state = state * tl.exp(g_t)
                delta = beta_t * (v_t - tl.sum(state * k_t[:, None], axis=0))
                state = state + k_t[:, None] * delta[None, :]
                o_t = tl.sum(state * (q_t * scale)[:, None], axis=0)
                tl.store(o + t * (HV * DV) + head * DV + dv, o_t.to(o.dtype.element_ty), mask=v_ok)
                if EACH_TOKEN:
                    token_row = tl.load(token_rows + tl.cast(seq, tl.int64) * token_rows_width + (t - bos))
                    tl.store(state_in + token_row.to(tl.int64) * (HV * DK * DV) + in_row, state, mask=tile_ok)
            if POOL:
                tl.store(state_in + write_row * (HV * DK * DV) + in_row, state, mask=tile_ok)
            if STORE_FINAL:
                tl.store(final + tl.cast(seq, tl.int64) * (HV * DK * DV) + in_row, state, mask=tile_ok)


def fused_recurrent_gated_delta_rule(*, q, k, v, g, beta, scale, initial_state, output_final_state, cu_seqlens,
                                     ssm_state_indices, has_initial_state, use_qk_l2norm_in_kernel,
                                     num_accepted_tokens=None):
    """Triton ``fused_recurrent_gated_delta_rule``; arguments as validated by ``ops/gdn/op.py``.

    q, k [B, T, Hk, Dk]; v [B, T, Hv, Dv]; g float32 and beta [B, T, Hv];
    states float32 [N, Hv, Dk, Dv] or a pool [S, Hv, Dk, Dv] (updated in place
    at ``ssm_state_indices``; with ``num_accepted_tokens`` [N] the indices are
    [N, W] and every token's state lands in its own row). Returns
    (o [B, T, Hv, Dv] in v's dtype, final states float32 [N, Hv, Dk, Dv] or None).
    """
    hk, dk = q.shape[2], q.shape[3]
    hv, dv = v.shape[2], v.shape[3]
    rows, plan, o = prepare_launch(q, k, v, g, beta, cu_seqlens=cu_seqlens, initial_state=initial_state,
                                   ssm_state_indices=ssm_state_indices, has_initial_state=has_initial_state,
                                   output_final_state=output_final_state, num_accepted_tokens=num_accepted_tokens)
    n = rows.n_seqs
    each_token = plan.token_rows is not None
    token_rows = plan.token_rows if each_token else plan.read_rows  # a dummy pointer when unused
    if n > 0 and hv > 0:
        _recurrent_kernel.launch(
            q.device, n * hv * triton.cdiv(dv, 16),
            rows.q, rows.k, rows.v, rows.g, rows.beta, o, plan.state_in, plan.final_arg, rows.cu,
            plan.read_rows, plan.write_rows, token_rows,
            float(scale), n, token_rows.shape[-1] if each_token else 1,
            rows.q.stride(0), rows.q.stride(1), rows.k.stride(0), rows.k.stride(1),
            rows.v.stride(0), rows.v.stride(1), rows.g.stride(0), rows.beta.stride(0),
            HK=hk, HV=hv, DK=dk, DV=dv, BLOCK_K=tile(dk),
            L2NORM=bool(use_qk_l2norm_in_kernel), POOL=plan.pool, STORE_FINAL=plan.final is not None,
            EPS=L2NORM_EPS, EACH_TOKEN=each_token,
        )
    return o.view(v.shape), plan.final
