"""vLLM's Qwen3.5 Gated DeltaNet layer with its core on qwen_ops.

:class:`QwenOpsGatedDeltaNet` subclasses vLLM's ``QwenGatedDeltaNetAttention``
and is registered with ``PluggableLayer.register_oot`` under that class name
(the key vLLM looks up when it builds the layer), so vLLM keeps its weights,
weight loading, projections, gated RMSNorm and output projection, and the
tensor-parallel sharding of all of them. Only the core changes: an opaque op
(``torch.ops.vllm.qwen_ops_gdn_attention_core``) reads the layer's state
pools and vLLM's ``GDNAttentionMetadata`` and runs

* decode rows (first ``num_decodes`` requests, one token each):
  ``causal_conv1d_update`` then ``fused_recurrent_gated_delta_rule``;
* prefill chunks: ``causal_conv1d_fn`` then ``chunk_gated_delta_rule``
  (each from its saved state where ``has_initial_state``),

with ``fused_gdn_gating`` for g and beta. vLLM's state pools are views into
its shared KV-cache allocation (other layers' pages sit between the slots),
while the qwen_ops ops take contiguous pools, so the rows of this step are
gathered into contiguous scratch pools, updated in place by the ops and
written back. The recurrent state is kept in float32 (the ops' contract), in
vLLM's layout ``[slots, Hv/tp, Dv, Dk]``; the scratch pool is the ops'
``[N, Hv/tp, Dk, Dv]``.
"""

import torch  # no "from __future__ import annotations": torch infers the core op's schema from real annotations

from .. import ops
from . import counters

CORE_OP = "qwen_ops_gdn_attention_core"


def _state_rows(pool: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    # Padding rows (-1) read row 0 and are never written back.
    return pool.index_select(0, rows.clamp_min(0).to(torch.int64))


def _write_rows(pool: torch.Tensor, rows: torch.Tensor, values: torch.Tensor) -> None:
    keep = rows >= 0
    pool.index_copy_(0, rows[keep].to(torch.int64), values[keep].to(pool.dtype))


def gdn_core(layer, mixed_qkv: torch.Tensor, b: torch.Tensor, a: torch.Tensor, core_attn_out: torch.Tensor,
             attn_metadata) -> None:
    """The GDN core of one step on qwen_ops ops.

    Args:
        layer: the :class:`QwenOpsGatedDeltaNet` (its ``kv_cache`` = (conv pool, ssm pool), weights).
        mixed_qkv: [T, (2*Hk*Dk + Hv*Dv)/tp] projected q|k|v before the conv.
        b, a: [T, Hv/tp] beta and decay inputs.
        core_attn_out: [T', Hv/tp, Dv] with T' >= T, written in rows [:T].
        attn_metadata: vLLM's ``GDNAttentionMetadata`` (decode rows first, then prefill chunks).
    """
    md = attn_metadata
    t = md.num_actual_tokens
    if t == 0:
        return
    if md.spec_sequence_masks is not None:
        raise NotImplementedError("qwen_ops vLLM plug-in: speculative decoding is not supported in the GDN layer")
    nd, ndt, npf = md.num_decodes, md.num_decode_tokens, md.num_prefills
    conv_pool, ssm_pool = layer.kv_cache[0], layer.kv_cache[1]
    rows = md.non_spec_state_indices_tensor[: nd + npf]
    local = torch.arange(nd + npf, dtype=torch.int32, device=mixed_qkv.device)

    # Contiguous scratch pools for this step's rows (see the module docstring).
    conv_states = _state_rows(conv_pool, rows)
    if layer.conv_state_dim_first:
        conv_states = conv_states.transpose(1, 2)
    conv_states = conv_states.to(mixed_qkv.dtype).contiguous()          # [N, K-1, C]
    ssm_states = _state_rows(ssm_pool, rows).transpose(-1, -2).to(torch.float32).contiguous()  # [N, Hv, Dk, Dv]

    mixed_qkv, a, b = mixed_qkv[:t], a[:t].contiguous(), b[:t].contiguous()
    g, beta = ops.fused_gdn_gating(layer.A_log, a, b, layer.dt_bias)
    counters.record(layer.prefix, "fused_gdn_gating")
    conv_w = layer.conv1d.weight.view(layer.conv1d.weight.size(0), layer.conv1d.weight.size(2))
    activation = "silu" if layer.activation in ("silu", "swish") else None

    conv_out = []
    if nd:
        conv_out.append(ops.causal_conv1d_update(mixed_qkv[:ndt].contiguous(), conv_states, conv_w,
                                                 layer.conv1d.bias, cache_indices=local[:nd], activation=activation))
        counters.record(layer.prefix, "causal_conv1d_update")
    if npf:
        conv_out.append(ops.causal_conv1d_fn(mixed_qkv[ndt:].contiguous(), conv_w, layer.conv1d.bias,
                                             conv_states=conv_states, query_start_loc=md.prefill_query_start_loc,
                                             cache_indices=local[nd:], has_initial_state=md.prefill_has_initial_state,
                                             activation=activation))
        counters.record(layer.prefix, "causal_conv1d_fn")
    mixed = conv_out[0] if len(conv_out) == 1 else torch.cat(conv_out)

    kd, hk, hv = layer.head_k_dim, layer.num_k_heads // layer.tp_size, layer.num_v_heads // layer.tp_size
    # What the step looked like, for tests: this rank's head counts, mixed and resumed batches.
    counters.record(layer.prefix, f"heads k={hk} v={hv}")
    if nd and npf:
        counters.record(layer.prefix, "step with decodes and prefill chunks")
    if npf and bool(md.prefill_has_initial_state.any()):
        counters.record(layer.prefix, "prefill chunk from a saved state")
    q = mixed[:, : hk * kd].reshape(t, hk, kd)
    k = mixed[:, hk * kd: 2 * hk * kd].reshape(t, hk, kd)
    v = mixed[:, 2 * hk * kd:].reshape(t, hv, layer.head_v_dim)
    if nd:
        o, _ = ops.fused_recurrent_gated_delta_rule(
            q[:ndt, None].contiguous(), k[:ndt, None].contiguous(), v[:ndt, None].contiguous(),
            g[:ndt, None].contiguous(), beta[:ndt, None].contiguous(), initial_state=ssm_states,
            ssm_state_indices=local[:nd], use_qk_l2norm_in_kernel=True)
        core_attn_out[:ndt] = o[:, 0].to(core_attn_out.dtype)
        counters.record(layer.prefix, "fused_recurrent_gated_delta_rule")
    if npf:
        o, _ = ops.chunk_gated_delta_rule(
            q[None, ndt:].contiguous(), k[None, ndt:].contiguous(), v[None, ndt:].contiguous(),
            g[None, ndt:].contiguous(), beta[None, ndt:].contiguous(), initial_state=ssm_states,
            cu_seqlens=md.prefill_query_start_loc, ssm_state_indices=local[nd:],
            has_initial_state=md.prefill_has_initial_state, use_qk_l2norm_in_kernel=True)
        core_attn_out[ndt:t] = o[0].to(core_attn_out.dtype)
        counters.record(layer.prefix, "chunk_gated_delta_rule")

    if layer.conv_state_dim_first:
        conv_states = conv_states.transpose(1, 2)
    _write_rows(conv_pool, rows, conv_states)
    _write_rows(ssm_pool, rows, ssm_states.transpose(-1, -2))


_op_registered = False


def _register_core_op() -> None:
    """``torch.ops.vllm.qwen_ops_gdn_attention_core``: opaque to torch.compile, like vLLM's own GDN core op."""
    global _op_registered
    if _op_registered:
        return
    from vllm.forward_context import get_forward_context
    from vllm.utils.torch_utils import LayerNameType, _resolve_layer_name, direct_register_custom_op

    def qwen_ops_gdn_attention_core(mixed_qkv: torch.Tensor, b: torch.Tensor, a: torch.Tensor,
                                    core_attn_out: torch.Tensor, layer_name: LayerNameType) -> None:
        context = get_forward_context()
        layer = context.no_compile_layers[_resolve_layer_name(layer_name)]
        metadata = context.attn_metadata
        if not isinstance(metadata, dict) or metadata.get(layer.prefix) is None:
            return  # vLLM's profiling run: no state pools bound yet
        gdn_core(layer, mixed_qkv, b, a, core_attn_out, metadata[layer.prefix])

    def fake(mixed_qkv, b, a, core_attn_out, layer_name) -> None:
        return None

    direct_register_custom_op(op_name=CORE_OP, op_func=qwen_ops_gdn_attention_core,
                              mutates_args=["core_attn_out"], fake_impl=fake)
    _op_registered = True


def _make_layer_class():
    from vllm.model_executor.layers.mamba.gdn.qwen_gdn_linear_attn import QwenGatedDeltaNetAttention
    from vllm.model_executor.layers.mamba.mamba_utils import is_conv_state_dim_first
    from vllm.utils.torch_utils import _encode_layer_name

    class QwenOpsGatedDeltaNet(QwenGatedDeltaNetAttention):
        """vLLM's Qwen3.5 GDN layer whose conv + delta-rule core runs on qwen_ops (see the module docstring)."""

        def __init__(self, config, vllm_config, prefix: str = "", gqa_interleaved_layout: bool = False,
                     reduce_results: bool = True) -> None:
            super().__init__(config, vllm_config, prefix, gqa_interleaved_layout=gqa_interleaved_layout,
                             reduce_results=reduce_results)
            if self.num_spec:
                raise NotImplementedError(
                    "qwen_ops vLLM plug-in: speculative decoding with the qwen_ops GDN layer is not supported "
                    "yet (vLLM's spec-decode conv state is K-1+num_spec wide; qwen_ops' conv ops take K-1). "
                    "Run without speculative_config, or set QWEN_OPS_VLLM_PLUGIN=0")
            if gqa_interleaved_layout:
                raise NotImplementedError(
                    "qwen_ops vLLM plug-in: only Qwen3.5's [q|k|v|z] projection layout is supported "
                    "(Qwen3-Next's interleaved layout is not)")
            self.conv_state_dim_first = is_conv_state_dim_first()
            _register_core_op()

        def get_state_dtype(self) -> tuple[torch.dtype, ...]:
            # The recurrent state stays float32 between steps, as the qwen_ops GDN ops keep it.
            conv_dtype, _ = super().get_state_dtype()
            return conv_dtype, torch.float32

        def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
            mixed_qkvz, _ = self.in_proj_qkvz(hidden_states)
            ba, _ = self.in_proj_ba(hidden_states)
            qkv_size = (self.key_dim * 2 + self.value_dim) // self.tp_size
            mixed_qkv, z = mixed_qkvz.split([qkv_size, self.value_dim // self.tp_size], dim=-1)
            z = z.reshape(z.size(0), -1, self.head_v_dim)
            b, a = self.split_ba(ba)
            core_attn_out = torch.zeros((hidden_states.size(0), self.num_v_heads // self.tp_size, self.head_v_dim),
                                        dtype=hidden_states.dtype, device=hidden_states.device)
            getattr(torch.ops.vllm, CORE_OP)(mixed_qkv, b.contiguous(), a.contiguous(), core_attn_out,
                                             _encode_layer_name(self.prefix))
            return self._output_projection(core_attn_out, z)

    return QwenOpsGatedDeltaNet


QwenOpsGatedDeltaNet = None


def register_gdn_layer():
    """Register the replacement under vLLM's class name ``QwenGatedDeltaNetAttention`` (idempotent)."""
    global QwenOpsGatedDeltaNet
    from vllm.model_executor.custom_op import PluggableLayer, op_registry_oot

    if QwenOpsGatedDeltaNet is None:
        QwenOpsGatedDeltaNet = _make_layer_class()
    if "QwenGatedDeltaNetAttention" not in op_registry_oot:
        PluggableLayer.register_oot(QwenOpsGatedDeltaNet, name="QwenGatedDeltaNetAttention")
    return QwenOpsGatedDeltaNet
