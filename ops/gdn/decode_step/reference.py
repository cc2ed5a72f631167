"""Reference of ``gdn_decode_step`` (defines its semantics): the composition the model runs at decode.

The conv update with SiLU (``conv.reference``), the gates (``reference_gating``), the L2-normalised
delta rule on the pool (``reference_recurrent``) and the GDN output norm (``reference_gating.gated_rms_norm``),
as ``model/network/gdn.py`` composes them op by op: one token per sequence, or the speculative-decoding
form of the conv update and the delta rule (several tokens per sequence, one pool row per token).
"""
from __future__ import annotations

import torch


def gdn_decode_step(*, mixed_qkv, z, b, a, conv_states, conv_taps, ssm_states, A_log, dt_bias, norm_weight,
                    state_indices, eps, query_start_loc=None, num_accepted_tokens=None):
    """Arguments and result as ``op.gdn_decode_step``; updates both pools in place."""
    from ...conv.reference import causal_conv1d_update
    from ..reference_gating import fused_gdn_gating, gated_rms_norm
    from ..reference_recurrent import fused_recurrent_gated_delta_rule

    batch = mixed_qkv.shape[0]  # tokens
    spec = num_accepted_tokens is not None
    num_v_heads, dk, dv = ssm_states.shape[1:]
    key_dim = (mixed_qkv.shape[1] - num_v_heads * dv) // 2
    x = causal_conv1d_update(x=mixed_qkv, conv_states=conv_states, weight=conv_taps.t(), bias=None,
                             cache_indices=state_indices, activation="silu", query_start_loc=query_start_loc,
                             num_accepted_tokens=num_accepted_tokens)
    # Decode: B one-token sequences [B, 1, ...]; speculative: the tokens packed along T [1, T, ...].
    shape = (1, batch) if spec else (batch, 1)
    q = x[:, :key_dim].reshape(*shape, -1, dk)
    k = x[:, key_dim: 2 * key_dim].reshape(*shape, -1, dk)
    v = x[:, 2 * key_dim:].reshape(*shape, num_v_heads, dv)
    g, beta = fused_gdn_gating(A_log=A_log, a=a, b=b, dt_bias=dt_bias)
    o, _ = fused_recurrent_gated_delta_rule(
        q=q, k=k, v=v, g=g.reshape(*shape, -1), beta=beta.reshape(*shape, -1), scale=float(dk) ** -0.5,
        initial_state=ssm_states, output_final_state=False, cu_seqlens=query_start_loc if spec else None,
        ssm_state_indices=state_indices, has_initial_state=None, use_qk_l2norm_in_kernel=True,
        num_accepted_tokens=num_accepted_tokens)
    o = gated_rms_norm(o.reshape(batch, num_v_heads, dv), z.reshape(batch, num_v_heads, dv), norm_weight, eps)
    return o.reshape(batch, num_v_heads * dv)
