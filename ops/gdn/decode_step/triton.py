"""Triton ``gdn_decode_step``: a GDN layer's decode step in one launch.

What the separate Triton kernels do one after another at decode (``causal_conv1d_update`` with SiLU,
``fused_gdn_gating``, the L2-normalised ``fused_recurrent_gated_delta_rule`` on the state pool, and the
gated RMSNorm the model applies after it) runs here in one program per (sequence, key head):

1. conv: the program's channels of the conv pool row (the key head's q and k channels and the v channels
   of its Hv / Hk value heads) are convolved and shifted, token by token (``conv.triton.update_step``),
   into a float32 scratch row of the conv outputs;
2. delta rule: per value head of the group and ``BLOCK_V`` state columns, the state tile is loaded once,
   walks the tokens (gates computed in place from ``a`` and ``b``) and is stored back into the pool;
   the raw outputs go to the output rows;
3. norm: each value head's output row is RMS-normalised, weighted and gated by ``silu(z)`` in place.

Programs own disjoint channels of the conv pool and disjoint heads of the state pool (a key head's q and k
channels belong to its group alone), and pool rows are unique per call, so the in-place updates need no
cross-program order. Inside a program, phase 2 reads the scratch phase 1 wrote and phase 3 the outputs
phase 2 wrote: a ``tl.debug_barrier()`` separates them (other threads of the program wrote them).

Speculative decoding (``SPEC``) follows the separate ops' state rule: sequence r's tokens start from pool
row ``rows[r, num_accepted[r] - 1]`` and the conv window and the state after its t-th token go to row
``rows[r, t]`` (so nothing is ever rolled back).

Ascend UB, bytes per buffer: the state tile ``BLOCK_K * BLOCK_V * 4`` (16 KiB with Dk = 128 and the fixed
``BLOCK_V = 32``), the conv window and taps tiles ``2 * BLOCK_KW * BLOCK_K * 4`` (4 KiB for K = 4), and
vectors of ``BLOCK_K`` / ``BLOCK_DV`` floats: about 22 KiB with Dk = Dv = 128, 44 KiB with Dk = Dv = 256.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from ..._triton import configured
from ...conv.triton import update_step
from ..triton_common import L2NORM_EPS, tile
from ..triton_gating import SOFTPLUS_THRESHOLD, softplus


def _fixed(**_shape) -> dict:
    # As the recurrent kernel: 32 state columns per tile (<= 32 KiB of state for Dk <= 256).
    return {"BLOCK_V": 32}


@configured(
    fixed=_fixed,
    cuda_configs=[{"BLOCK_V": bv, "num_warps": w} for bv in (16, 32, 64) for w in (2, 4)],
    key=["HV", "DK", "DV"],
    restore_value=["conv_states", "ssm_states"],
)
@triton.jit
def _decode_step_kernel(
    mixed, z, b, a, conv_states, conv_taps, ssm_states, A_log, dt_bias, norm_weight,
    query_start_loc, state_rows, num_accepted, conv_out, out,
    n_seqs, rows_width, stride_mixed, stride_z, stride_b, stride_a, scale, eps,
    HK: tl.constexpr, HV: tl.constexpr, DK: tl.constexpr, DV: tl.constexpr, KW: tl.constexpr,
    BLOCK_K: tl.constexpr, BLOCK_DV: tl.constexpr, BLOCK_V: tl.constexpr, BLOCK_KW: tl.constexpr,
    SPEC: tl.constexpr, L2_EPS: tl.constexpr, THRESHOLD: tl.constexpr,
):
    KEY_DIM: tl.constexpr = HK * DK
    C: tl.constexpr = 2 * KEY_DIM + HV * DV
    GROUP: tl.constexpr = HV // HK
    CONV_ROW: tl.constexpr = (KW - 1) * C
    STATE_ROW: tl.constexpr = HV * DK * DV
    N_VBLOCKS: tl.constexpr = (DV + BLOCK_V - 1) // BLOCK_V
    dk = tl.arange(0, BLOCK_K)
    k_ok = dk < DK
    dv_all = tl.arange(0, BLOCK_DV)
    dv_all_ok = dv_all < DV
    for item in tl.range(tl.program_id(0), n_seqs * HK, tl.num_programs(0)):
        seq = item // HK
        kh = item % HK
        if SPEC:
            rows = state_rows + tl.cast(seq, tl.int64) * rows_width
            first = tl.load(rows + tl.load(num_accepted + seq).to(tl.int64) - 1).to(tl.int64)
            bos = tl.load(query_start_loc + seq).to(tl.int64)
            eos = tl.load(query_start_loc + seq + 1).to(tl.int64)
        else:
            rows = state_rows + seq
            first = tl.load(rows).to(tl.int64)
            bos = tl.cast(seq, tl.int64)
            eos = bos + 1
        real = first >= 0
        if real:  # a row of -1 is padding: its outputs stay zero and no pool row is touched
            # 1. conv update + SiLU of this program's channels, token after token.
            previous = first
            for t in tl.range(bos, eos):
                if SPEC:
                    row = tl.load(rows + (t - bos)).to(tl.int64)
                else:
                    row = first
                read_state = conv_states + previous * CONV_ROW
                write_state = conv_states + row * CONV_ROW
                for part in tl.static_range(2):  # the key head's q channels, then its k channels
                    chans = part * KEY_DIM + kh * DK + dk
                    x_t = tl.load(mixed + t * stride_mixed + chans, mask=k_ok, other=0.0)
                    y = update_step(read_state, write_state, x_t, conv_taps, conv_taps, chans, k_ok, real, C, 1, C,
                                    KW, False, True, BLOCK_KW)
                    tl.store(conv_out + t * C + chans, y, mask=k_ok)
                for g in tl.range(GROUP):  # the v channels of the group's value heads
                    chans = 2 * KEY_DIM + (kh * GROUP + g) * DV + dv_all
                    x_t = tl.load(mixed + t * stride_mixed + chans, mask=dv_all_ok, other=0.0)
                    y = update_step(read_state, write_state, x_t, conv_taps, conv_taps, chans, dv_all_ok, real, C, 1,
                                    C, KW, False, True, BLOCK_KW)
                    tl.store(conv_out + t * C + chans, y, mask=dv_all_ok)
                previous = row
            tl.debug_barrier()  # phase 2 reads the conv outputs other threads stored

            # 2. gates and the delta rule, per value head and state column tile.
            for g in tl.range(GROUP):
                head = kh * GROUP + g
                decay_rate = -tl.exp(tl.load(A_log + head).to(tl.float32))
                gate_bias = tl.load(dt_bias + head).to(tl.float32)
                for vb in tl.range(N_VBLOCKS):
                    dv = vb * BLOCK_V + tl.arange(0, BLOCK_V)
                    v_ok = dv < DV
                    tile_ok = k_ok[:, None] & v_ok[None, :]
                    in_row = head * (DK * DV) + dk[:, None] * DV + dv[None, :]
                    state = tl.load(ssm_states + first * STATE_ROW + in_row, mask=tile_ok, other=0.0)
                    for t in tl.range(bos, eos):
                        q_t = tl.load(conv_out + t * C + kh * DK + dk, mask=k_ok, other=0.0)
                        k_t = tl.load(conv_out + t * C + KEY_DIM + kh * DK + dk, mask=k_ok, other=0.0)
                        v_t = tl.load(conv_out + t * C + 2 * KEY_DIM + head * DV + dv, mask=v_ok, other=0.0)
                        q_t = q_t / tl.sqrt(tl.sum(q_t * q_t) + L2_EPS)
                        k_t = k_t / tl.sqrt(tl.sum(k_t * k_t) + L2_EPS)
                        g_t = decay_rate * softplus(tl.load(a + t * stride_a + head).to(tl.float32) + gate_bias,
                                                    THRESHOLD)
                        beta_t = 1.0 / (1.0 + tl.exp(-tl.load(b + t * stride_b + head).to(tl.float32)))
                        state = state * tl.exp(g_t)
                        delta = beta_t * (v_t - tl.sum(state * k_t[:, None], axis=0))
                        state = state + k_t[:, None] * delta[None, :]
                        o_t = tl.sum(state * (q_t * scale)[:, None], axis=0)
                        tl.store(out + t * (HV * DV) + head * DV + dv, o_t, mask=v_ok)
                        if SPEC:  # every token's state to its own row
                            row = tl.load(rows + (t - bos)).to(tl.int64)
                            tl.store(ssm_states + row * STATE_ROW + in_row, state, mask=tile_ok)
                    if not SPEC:
                        tl.store(ssm_states + first * STATE_ROW + in_row, state, mask=tile_ok)
            tl.debug_barrier()  # phase 3 reads whole output rows other threads stored

            # 3. gated RMSNorm of each value head's output row: w * rmsnorm(o) * silu(z).
            weight = tl.load(norm_weight + dv_all, mask=dv_all_ok, other=0.0).to(tl.float32)
            for g in tl.range(GROUP):
                head = kh * GROUP + g
                for t in tl.range(bos, eos):
                    o_row = out + t * (HV * DV) + head * DV + dv_all
                    o = tl.load(o_row, mask=dv_all_ok, other=0.0)
                    normed = o / tl.sqrt(tl.sum(o * o) / DV + eps)
                    gate = tl.load(z + t * stride_z + head * DV + dv_all, mask=dv_all_ok, other=0.0).to(tl.float32)
                    y = weight * normed * (gate / (1.0 + tl.exp(-gate)))
                    tl.debug_barrier()  # every thread has read the row before any overwrites it
                    tl.store(o_row, y, mask=dv_all_ok)


def gdn_decode_step(*, mixed_qkv, z, b, a, conv_states, conv_taps, ssm_states, A_log, dt_bias, norm_weight,
                    state_indices, eps, query_start_loc=None, num_accepted_tokens=None):
    """Triton ``gdn_decode_step``; arguments as validated by ``decode_step/op.py``.

    mixed_qkv [T, C = 2 Hk Dk + Hv Dv], z [T, Hv Dv], b, a [T, Hv] float32 with contiguous rows;
    conv_states [S, K-1, C] and ssm_states [S, Hv, Dk, Dv] contiguous float32 pools, updated in place;
    conv_taps [K, C]; A_log, dt_bias [Hv]; norm_weight [Dv]; state_indices int32/int64 [B] (one token per
    sequence, T = B) or, with query_start_loc [B+1] and num_accepted_tokens [B], [B, W] (speculative decoding).
    Returns float32 [T, Hv Dv], zeros on padding rows.
    """
    _, hv, dk, dv = ssm_states.shape
    tokens, channels = mixed_qkv.shape
    hk = (channels - hv * dv) // (2 * dk)
    out = torch.zeros((tokens, hv * dv), dtype=torch.float32, device=mixed_qkv.device)
    n = state_indices.shape[0]
    if n == 0 or tokens == 0:
        return out
    conv_out = torch.empty((tokens, channels), dtype=torch.float32, device=mixed_qkv.device)  # phase 1 -> 2
    spec = num_accepted_tokens is not None
    rows = state_indices.contiguous()
    kw = conv_taps.shape[0]
    _decode_step_kernel.launch(
        mixed_qkv.device, n * hk,
        mixed_qkv, z, b, a, conv_states, conv_taps, ssm_states, A_log, dt_bias, norm_weight,
        query_start_loc if spec else rows, rows, num_accepted_tokens if spec else rows,  # dummies when unused
        conv_out, out,
        n, rows.shape[1] if spec else 1, mixed_qkv.stride(0), z.stride(0), b.stride(0), a.stride(0),
        float(dk) ** -0.5, float(eps),
        HK=hk, HV=hv, DK=dk, DV=dv, KW=kw, BLOCK_K=tile(dk), BLOCK_DV=triton.next_power_of_2(dv),
        BLOCK_KW=triton.next_power_of_2(max(kw - 1, 1)), SPEC=spec, L2_EPS=L2NORM_EPS, THRESHOLD=SOFTPLUS_THRESHOLD,
    )
    return out
