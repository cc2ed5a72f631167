"""Qwen3.5's Gated DeltaNet (linear attention) layer over a flat mixed batch, through ``qwen_ops.ops``.

Decode rows (one token each) take the recurrent path: ``causal_conv1d_update``
and ``fused_recurrent_gated_delta_rule`` on the state pools. Prefill chunks
take the chunked path: ``causal_conv1d_fn`` and ``chunk_gated_delta_rule``
with ``cu_seqlens``, starting from the saved state where ``has_initial_state``
(later chunks of a chunked prefill). Both update the pools in place.

Where one backend serves the three decode ops and also serves ``gdn_decode_step``
in one launch, the decode rows instead run as one ``gdn_decode_step`` call per
layer (``ops/gdn/decode_step/``: conv update, gates, delta rule and output norm,
the same arithmetic): in float32 the torch backend's C++ CPU kernel (one token
per sequence) or the triton / ascendc kernels (speculative verify rows too), in
bfloat16 the C++ kernel; the prefill rows of a mixed step still take the chunked path.

With the states in the pool's pages (the engine's layout, ``worker/gdn_pages.py``) a
layer reads its group's rows, ``batch.gdn_state_indices[group]``; batches
without them (scratch runs, tests) use ``batch.state_indices``.
"""
from __future__ import annotations

import os

import torch

from ... import ops
from ...ops._backend import IMPLEMENTATIONS, resolved_backend
from ...ops.gdn.decode_step.op import (ACTIVATION_DTYPES, OP as FUSED_DECODE_OP, gdn_decode_step,
                                       gdn_decode_step_available, takes_cpu_kernel)
from ...ops.gdn.reference_gating import gated_rms_norm
from ..loading.config import Qwen35Config
from .backends import backend_chooser
from .kv_cache_groups import gdn_layer_groups
from .layers import linear
from .step_inputs import StepInputs


# QWEN_OPS_FUSED_GDN_DECODE=0 composes the decode rows from the ops one by one (to compare, or to test them).
FUSED_GDN_DECODE_ENV = "QWEN_OPS_FUSED_GDN_DECODE"
_fused_decode_on = os.environ.get(FUSED_GDN_DECODE_ENV, "1") != "0"
gdn_decode_step_available()  # looks the C++ kernel up (and registers its fake) before any step is traced
# The ops gdn_decode_step stands for: it runs only where the backend that serves all of them serves it too.
FUSED_DECODE_OPS = ("causal_conv1d_update", "fused_gdn_gating", "fused_recurrent_gated_delta_rule")


def set_fused_gdn_decode(enabled: bool) -> bool:
    """Run the GDN decode rows as one ``gdn_decode_step`` call (True) or op by op (False); returns the previous
    setting. On the torch backend it takes effect only where ``qwen_ops._C`` has the C++ kernel
    (``gdn_decode_step_available()``)."""
    global _fused_decode_on
    previous = _fused_decode_on
    _fused_decode_on = bool(enabled)
    return previous


def fused_gdn_decode_enabled() -> bool:
    """Whether GDN decode rows run as one ``gdn_decode_step`` call (``set_fused_gdn_decode``)."""
    return _fused_decode_on


class GatedDeltaNet:
    """in_proj_qkv -> causal conv + SiLU over [q | k | v] -> gated delta rule -> gated RMSNorm -> out_proj."""

    def __init__(self, config: Qwen35Config, layer: int, weights: dict[str, torch.Tensor], backend: str | None):
        p = f"layers.{layer}.linear_attn."
        self.layer = layer
        self.group = gdn_layer_groups(config)[layer][0]
        self.backend = backend_chooser(backend)
        self.nk, self.nv = config.linear_num_key_heads, config.linear_num_value_heads
        self.dk, self.dv = config.linear_key_head_dim, config.linear_value_head_dim
        self.key_dim, self.value_dim = config.gdn_key_dim, config.gdn_value_dim
        self.eps = config.rms_norm_eps
        self.qkv_w, self.z_w, self.b_w, self.a_w = (weights[f"{p}in_proj_{n}.weight"] for n in ("qkv", "z", "b", "a"))
        self.conv_w = weights[p + "conv1d.weight"].squeeze(1).contiguous()  # [C, 1, K] -> [C, K]
        # A second copy of the conv weight, [K, C]: the C++ gdn_decode_step kernel (bindings/cpu/
        # gdn_decode_step_cpu.cpp) reads the taps in that layout, while the conv update ops read [C, K].
        # It stays until that kernel reads [C, K] (a change of the kernel, not of this layer).
        self.conv_taps = self.conv_w.t().contiguous()
        self.A_log, self.dt_bias = weights[p + "A_log"], weights[p + "dt_bias"]
        self.norm_w = weights[p + "norm.weight"]
        self.out_w = weights[p + "out_proj.weight"]

    def forward(self, x: torch.Tensor, batch: StepInputs, caches) -> torch.Tensor:
        """x: [T, hidden] -> [T, hidden]."""
        t = x.shape[0]
        conv_states, ssm_states = caches.conv_states[self.layer], caches.ssm_states[self.layer]
        pools = (getattr(caches, "checkpoint_conv", {}).get(self.layer),
                 getattr(caches, "checkpoint_ssm", {}).get(self.layer))
        mixed, z, b, a = (linear(x, w) for w in (self.qkv_w, self.z_w, self.b_w, self.a_w))

        nd, ndt = batch.num_decodes, batch.num_decode_tokens
        spec_rows = getattr(batch, "spec_state_indices", None)  # step batches of tests may lack it
        spec = spec_rows is not None
        rows = batch.state_indices
        paged = getattr(batch, "gdn_state_indices", None)
        if paged is not None:
            rows = paged[self.group]
            if spec:
                spec_rows = batch.gdn_spec_state_indices[self.group]
        fused = self._decodes_fused(mixed, conv_states, ssm_states, spec) if nd else None
        if fused is not None:
            # The decode rows in one call (conv, gates, delta rule, output norm); any prefill rows op by op.
            spec_form = dict(query_start_loc=batch.query_start_loc[: nd + 1],
                             num_accepted_tokens=batch.num_accepted_tokens) if spec else {}
            o = gdn_decode_step(mixed[:ndt], z[:ndt], b[:ndt], a[:ndt], conv_states, self.conv_taps, ssm_states,
                                self.A_log, self.dt_bias, self.norm_w, spec_rows if spec else rows[:nd], self.eps,
                                backend=fused, **spec_form)
            if ndt < t:
                o = torch.cat([o, self._composed(mixed[ndt:], z[ndt:], b[ndt:], a[ndt:], 0, 0, rows, None, batch,
                                                 conv_states, ssm_states, pools)])
        else:
            o = self._composed(mixed, z, b, a, nd, ndt, rows, spec_rows, batch, conv_states, ssm_states, pools)
        return linear(o, self.out_w)

    def _decodes_fused(self, mixed: torch.Tensor, conv_states: torch.Tensor, ssm_states: torch.Tensor,
                       spec: bool) -> str | None:
        """The backend that runs the decode rows as one ``gdn_decode_step``, or None (op by op): the switch is
        on, the tensors are the float32 ones it takes (or bfloat16 ones, for the torch backend), one backend
        would serve every op it stands for, and that backend serves it in one launch (the torch backend only
        through its C++ kernel: one token per sequence, CPU tensors, ``qwen_ops._C`` built)."""
        if not (_fused_decode_on and mixed.dtype in ACTIVATION_DTYPES and conv_states.dtype == mixed.dtype
                and self.conv_taps.dtype == mixed.dtype and ssm_states.dtype == torch.float32
                and conv_states.is_contiguous() and ssm_states.is_contiguous()):
            return None
        served_by = {resolved_backend(op, self.backend(op), mixed.device) for op in FUSED_DECODE_OPS}
        if len(served_by) != 1:
            return None
        (name,) = served_by
        if mixed.dtype != torch.float32 and name != "torch":  # bfloat16: the torch backend's C++ kernel only
            return None
        if name == "torch" and not takes_cpu_kernel(mixed.device, name, spec):
            return None
        return name if name in IMPLEMENTATIONS[FUSED_DECODE_OP] else None

    def _composed(self, mixed, z, b, a, nd, ndt, rows, spec_rows, batch: StepInputs, conv_states, ssm_states,
                  pools=(None, None)):
        """The ops one by one over [nd decode sequences (ndt tokens) | the step's prefill chunks] -> [T', value_dim].

        ``rows``: the step's state rows of all its sequences (prefill chunks take ``rows[batch.num_decodes:]``);
        ``spec_rows`` the speculative ones, or None. ``pools``: this layer's (conv, recurrent) checkpoint pools
        ("chunk" prefix caching), which the step's ``batch.gdn_checkpoints`` saves fill.
        """
        t = mixed.shape[0]
        spec = spec_rows is not None
        first_prefill = batch.num_decodes
        g, beta = ops.fused_gdn_gating(self.A_log, a.contiguous(), b.contiguous(), self.dt_bias,
                                       backend=self.backend("fused_gdn_gating"))
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
        saves = getattr(batch, "gdn_checkpoints", None)
        if saves is not None and pools[0] is None:
            raise ValueError(f"GDN layer {self.layer}: the step saves GDN checkpoints but the caches have no "
                             "checkpoint pools (add_gdn_checkpoint_pools)")
        # "chunk" prefix caching: saves inside prefill rows (the kernel's chunk ends) and at rows' ends.
        saves_inside = saves is not None and saves.slots.numel() > 0
        saves_at_ends = saves is not None and saves.final_slots.numel() > 0
        if saves_inside and ndt < t:
            # The conv state at a boundary inside a row is the last K - 1 conv inputs before it ("chunk" prefix
            # caching); a row's end is saved below, from the state row.
            width = self.conv_w.shape[1] - 1
            taps = saves.ends[:, None] - width + torch.arange(width, device=saves.ends.device)
            pools[0].index_copy_(0, saves.slots, mixed[ndt:][taps].to(pools[0].dtype))
        if ndt < t:
            conv_out.append(ops.causal_conv1d_fn(
                mixed[ndt:].contiguous(), self.conv_w, conv_states=conv_states,
                query_start_loc=batch.prefill_query_start_loc, cache_indices=rows[first_prefill:],
                has_initial_state=batch.has_initial_state[first_prefill:], activation="silu",
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
            result = ops.chunk_gated_delta_rule(
                q[None, ndt:].contiguous(), k[None, ndt:].contiguous(), v[None, ndt:].contiguous(),
                g[None, ndt:].contiguous(), beta[None, ndt:].contiguous(), initial_state=ssm_states,
                cu_seqlens=batch.prefill_query_start_loc, ssm_state_indices=rows[first_prefill:],
                has_initial_state=batch.has_initial_state[first_prefill:], use_qk_l2norm_in_kernel=True,
                backend=self.backend("chunk_gated_delta_rule"), chunk_indices=batch.chunk_indices,
                chunk_offsets=batch.chunk_offsets,
                checkpoint_boundaries=saves.boundaries if saves_inside else None)
            if saves_inside:  # emitted at the kernel's chunk ends
                pools[1].index_copy_(0, saves.slots, result[2])
            if saves_at_ends:  # the states the step left in the rows
                final_rows = rows[first_prefill:].index_select(0, saves.final_seqs).long()
                pools[0].index_copy_(0, saves.final_slots, conv_states.index_select(0, final_rows).to(pools[0].dtype))
                pools[1].index_copy_(0, saves.final_slots, ssm_states.index_select(0, final_rows))
            outs.append(result[0][0])
        o = outs[0] if len(outs) == 1 else torch.cat(outs)  # [T, nv, dv]
        o = gated_rms_norm(o, z.reshape(t, self.nv, self.dv), self.norm_w, self.eps)
        return o.reshape(t, self.value_dim)
