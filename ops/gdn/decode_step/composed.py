"""The decode step as the separate ops compose it: what ``gdn_decode_step`` fuses, on any backend.

``causal_conv1d_update`` (SiLU), ``fused_gdn_gating``, the L2-normalised ``fused_recurrent_gated_delta_rule``
on the pool and the gated RMSNorm, each a call (a launch) of its own, as the model's op-by-op decode
(``model/network/gdn.py``). The tests and ``bench/kernels/bench_gdn_decode_step.py`` compare the one-launch
kernels with it.
"""
from __future__ import annotations

import torch

from ...conv.op import causal_conv1d_update
from ..op import fused_gdn_gating, fused_recurrent_gated_delta_rule
from ..reference_gating import gated_rms_norm


def composed_decode_step(backend: str | None, *, mixed_qkv, z, b, a, conv_states, conv_taps, ssm_states, A_log,
                         dt_bias, norm_weight, state_indices, eps, query_start_loc=None,
                         num_accepted_tokens=None) -> torch.Tensor:
    """``gdn_decode_step``'s arguments and result (both pools updated in place), op by op on ``backend``."""
    tokens = mixed_qkv.shape[0]
    hv, dk, dv = ssm_states.shape[1:]
    key_dim = (mixed_qkv.shape[1] - hv * dv) // 2
    spec = num_accepted_tokens is not None
    x = causal_conv1d_update(mixed_qkv, conv_states, conv_taps.t().contiguous(), cache_indices=state_indices,
                             activation="silu", query_start_loc=query_start_loc,
                             num_accepted_tokens=num_accepted_tokens, backend=backend)
    g, beta = fused_gdn_gating(A_log, a.contiguous(), b.contiguous(), dt_bias, backend=backend)
    shape = (1, tokens) if spec else (tokens, 1)  # packed verify rows, or one token per sequence
    q = x[:, :key_dim].reshape(*shape, -1, dk).contiguous()
    k = x[:, key_dim: 2 * key_dim].reshape(*shape, -1, dk).contiguous()
    v = x[:, 2 * key_dim:].reshape(*shape, hv, dv).contiguous()
    o, _ = fused_recurrent_gated_delta_rule(
        q, k, v, g.reshape(*shape, hv).contiguous(), beta.reshape(*shape, hv).contiguous(), initial_state=ssm_states,
        cu_seqlens=query_start_loc, ssm_state_indices=state_indices, num_accepted_tokens=num_accepted_tokens,
        use_qk_l2norm_in_kernel=True, backend=backend)
    return gated_rms_norm(o.reshape(tokens, hv, dv), z.reshape(tokens, hv, dv), norm_weight, eps).reshape(tokens, -1)
