"""Qwen3.5's Gated DeltaNet (linear attention) layer over a flat mixed batch, through ``qwen_ops.ops``.

Decode rows (one token each) take the recurrent path: ``causal_conv1d_update``
and ``fused_recurrent_gated_delta_rule`` on the state pools. Prefill chunks
take the chunked path: ``causal_conv1d_fn`` and ``chunk_gated_delta_rule``
with ``cu_seqlens``, starting from the saved state where ``has_initial_state``
(later chunks of a chunked prefill). Both update the pools in place.

With the states in the pool's pages (the engine's layout, ``gdn_pages.py``) a
layer reads its group's rows, ``batch.gdn_state_indices[group]``; batches
without them (scratch runs, tests) use ``batch.state_indices``.
"""
from __future__ import annotations

import torch

from .. import ops
from .backends import backend_chooser
from .config import Qwen35Config
from .kv_cache import gdn_layer_groups
from .step_inputs import StepInputs
from .fused_projection import FusedProjection
from .layers import gated_rms_norm, linear


class GatedDeltaNet:
    """in_proj_qkv -> causal conv + SiLU over [q | k | v] -> gated delta rule -> gated RMSNorm -> out_proj.

    The four input projections (qkv, z, b, a) run as one ``FusedProjection``; ``qkv_w``, ``z_w``,
    ``b_w``, ``a_w`` are views of its stacked weight.
    """

    def __init__(self, config: Qwen35Config, layer: int, weights: dict[str, torch.Tensor], backend: str | None):
        p = f"layers.{layer}.linear_attn."
        self.layer = layer
        self.group = gdn_layer_groups(config)[layer][0]
        self.backend = backend_chooser(backend)
        self.nk, self.nv = config.linear_num_key_heads, config.linear_num_value_heads
        self.dk, self.dv = config.linear_key_head_dim, config.linear_value_head_dim
        self.key_dim, self.value_dim = config.gdn_key_dim, config.gdn_value_dim
        self.eps = config.rms_norm_eps
        # The order of weights.fused_groups, so that the stacked weight is a view of the loaded ones.
        self.in_proj = FusedProjection([weights[p + f"in_proj_{n}.weight"] for n in ("qkv", "z", "b", "a")])
        self.qkv_w, self.z_w, self.b_w, self.a_w = self.in_proj.parts
        self.conv_w = weights[p + "conv1d.weight"].squeeze(1).contiguous()  # [C, 1, K] -> [C, K]
        self.A_log, self.dt_bias = weights[p + "A_log"], weights[p + "dt_bias"]
        self.norm_w = weights[p + "norm.weight"]
        self.out_w = weights[p + "out_proj.weight"]

    def forward(self, x: torch.Tensor, batch: StepInputs, caches) -> torch.Tensor:
        """x: [T, hidden] -> [T, hidden]."""
        t = x.shape[0]
        conv_states, ssm_states = caches.conv_states[self.layer], caches.ssm_states[self.layer]
        mixed, z, b, a = self.in_proj(x)  # column views of one [T, conv_dim + value_dim + 2 nv] output
        g, beta = ops.fused_gdn_gating(self.A_log, a.contiguous(), b.contiguous(), self.dt_bias,
                                       backend=self.backend("fused_gdn_gating"))

        nd, ndt = batch.num_decodes, batch.num_decode_tokens
        spec_rows = getattr(batch, "spec_state_indices", None)  # step batches of tests may lack it
        spec = spec_rows is not None
        rows = batch.state_indices
        paged = getattr(batch, "gdn_state_indices", None)
        if paged is not None:
            rows = paged[self.group]
            if spec:
                spec_rows = batch.gdn_spec_state_indices[self.group]
        conv_out = []
        if nd and spec:
            # Speculative verify rows (1 + k tokens each): the state after token t goes to the row's column t,
            # reading starts from column num_accepted_tokens - 1 (no rollback needed, as in vLLM).
            conv_out.append(ops.causal_conv1d_update(
                mixed[:ndt], conv_states, self.conv_w, cache_indices=spec_rows,
                query_start_loc=batch.query_start_loc[: nd + 1], num_accepted_tokens=batch.num_accepted_tokens,
                activation="silu", backend=self.backend("causal_conv1d_update")))
        elif nd:
            conv_out.append(ops.causal_conv1d_update(
                mixed[:ndt], conv_states, self.conv_w, cache_indices=rows[:nd],
                activation="silu", backend=self.backend("causal_conv1d_update")))
        if ndt < t:
            conv_out.append(ops.causal_conv1d_fn(
                mixed[ndt:].contiguous(), self.conv_w, conv_states=conv_states,
                query_start_loc=batch.prefill_query_start_loc, cache_indices=rows[nd:],
                has_initial_state=batch.has_initial_state[nd:], activation="silu",
                backend=self.backend("causal_conv1d_fn")))
        mixed = conv_out[0] if len(conv_out) == 1 else torch.cat(conv_out)

        q = mixed[:, : self.key_dim].reshape(t, self.nk, self.dk)
        k = mixed[:, self.key_dim: 2 * self.key_dim].reshape(t, self.nk, self.dk)
        v = mixed[:, 2 * self.key_dim:].reshape(t, self.nv, self.dv)
        outs = []
        if nd and spec:
            o, _ = ops.fused_recurrent_gated_delta_rule(
                q[None, :ndt].contiguous(), k[None, :ndt].contiguous(), v[None, :ndt].contiguous(),
                g[None, :ndt].contiguous(), beta[None, :ndt].contiguous(), initial_state=ssm_states,
                cu_seqlens=batch.query_start_loc[: nd + 1], ssm_state_indices=spec_rows,
                num_accepted_tokens=batch.num_accepted_tokens, use_qk_l2norm_in_kernel=True,
                backend=self.backend("fused_recurrent_gated_delta_rule"))
            outs.append(o[0])
        elif nd:
            # Decodes: a batch of nd one-token sequences on the state pool.
            o, _ = ops.fused_recurrent_gated_delta_rule(
                q[:ndt, None].contiguous(), k[:ndt, None].contiguous(), v[:ndt, None].contiguous(),
                g[:ndt, None].contiguous(), beta[:ndt, None].contiguous(), initial_state=ssm_states,
                ssm_state_indices=rows[:nd], use_qk_l2norm_in_kernel=True,
                backend=self.backend("fused_recurrent_gated_delta_rule"))
            outs.append(o[:, 0])
        if ndt < t:
            # Prefill chunks: packed along T, each from its saved state or from zeros.
            o, _ = ops.chunk_gated_delta_rule(
                q[None, ndt:].contiguous(), k[None, ndt:].contiguous(), v[None, ndt:].contiguous(),
                g[None, ndt:].contiguous(), beta[None, ndt:].contiguous(), initial_state=ssm_states,
                cu_seqlens=batch.prefill_query_start_loc, ssm_state_indices=rows[nd:],
                has_initial_state=batch.has_initial_state[nd:], use_qk_l2norm_in_kernel=True,
                backend=self.backend("chunk_gated_delta_rule"), chunk_indices=batch.chunk_indices,
                chunk_offsets=batch.chunk_offsets)
            outs.append(o[0])
        o = outs[0] if len(outs) == 1 else torch.cat(outs)  # [T, nv, dv]
        o = gated_rms_norm(o, z.view(t, self.nv, self.dv), self.norm_w, self.eps)
        return linear(o.reshape(t, self.value_dim), self.out_w)
