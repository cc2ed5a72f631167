"""Reference of ``gdn_decode_step`` (defines its semantics): the composition the model runs at decode.

One token per sequence: the conv update with SiLU (``conv.reference``), the gates
(``reference_gating``), the L2-normalised delta rule on the pool (``reference_recurrent``) and the
GDN output norm (``reference_gating.gated_rms_norm``), as ``model/network/gdn.py`` composes them op by op.
"""
from __future__ import annotations

import torch


def gdn_decode_step(*, mixed_qkv, z, b, a, conv_states, conv_taps, ssm_states, A_log, dt_bias, norm_weight,
                    state_indices, eps):
    """Arguments and result as ``decode_step_op.gdn_decode_step``; updates both pools in place."""
    from ..conv.reference import causal_conv1d_update
    from .reference_gating import fused_gdn_gating, gated_rms_norm
    from .reference_recurrent import fused_recurrent_gated_delta_rule

    batch = mixed_qkv.shape[0]
    num_v_heads, dk, dv = ssm_states.shape[1:]
    key_dim = (mixed_qkv.shape[1] - num_v_heads * dv) // 2
    x = causal_conv1d_update(x=mixed_qkv, conv_states=conv_states, weight=conv_taps.t(), bias=None,
                             cache_indices=state_indices, activation="silu")
    q = x[:, :key_dim].reshape(batch, 1, -1, dk)
    k = x[:, key_dim: 2 * key_dim].reshape(batch, 1, -1, dk)
    v = x[:, 2 * key_dim:].reshape(batch, 1, num_v_heads, dv)
    g, beta = fused_gdn_gating(A_log=A_log, a=a, b=b, dt_bias=dt_bias)
    o, _ = fused_recurrent_gated_delta_rule(
        q=q, k=k, v=v, g=g[:, None], beta=beta[:, None], scale=float(dk) ** -0.5, initial_state=ssm_states,
        output_final_state=False, cu_seqlens=None, ssm_state_indices=state_indices, has_initial_state=None,
        use_qk_l2norm_in_kernel=True)
    o = gated_rms_norm(o[:, 0], z.reshape(batch, num_v_heads, dv), norm_weight, eps)
    return o.reshape(batch, num_v_heads * dv)
