"""Qwen3.5's full-attention layer over a flat mixed batch, through ``qwen_ops.ops``."""
from __future__ import annotations

from typing import Callable

import torch

from ... import ops
from ...ops.attention.decode_step_op import attention_decode_step, attention_decode_step_available, takes_cpu_kernel
from ..loading.config import Qwen35Config
from .backends import backend_chooser
from .layers import apply_rope, linear, rms_norm_scaled, zero_centred_scale
from .step_inputs import StepInputs

attention_decode_step_available()  # looks the C++ operator up (and registers its fake) before any step is traced

# Called with (layer index, key [T, Hkv, D], value [T, Hkv, D]) on the step's new K/V (INT8 calibration).
KVObserver = Callable[[int, torch.Tensor, torch.Tensor], None]


class FullAttention:
    """Gated GQA attention: q_proj gives [query | gate] per head, q/k RMS-normed, partial RoPE.

    ``out = o_proj(attention(q, k, v) * sigmoid(gate))``; the step's new K/V are
    written to the paged cache (``reshape_and_cache``) and attention runs as one
    ``mixed_attention`` call over decode rows and prefill chunks. A step of decodes
    only on the CPU (torch backend) runs both as one ``attention_decode_step`` call.
    """

    def __init__(self, config: Qwen35Config, layer: int, weights: dict[str, torch.Tensor], backend: str | None):
        p = f"layers.{layer}.self_attn."
        self.layer = layer
        self.backend = backend_chooser(backend)
        self.num_heads = config.num_attention_heads
        self.num_kv_heads = config.num_key_value_heads
        self.head_dim = config.head_dim
        self.eps = config.rms_norm_eps
        bias = config.attention_bias
        self.q_w, self.k_w, self.v_w = (weights[p + n + "_proj.weight"] for n in "qkv")
        self.q_b, self.k_b, self.v_b = (weights[p + n + "_proj.bias"] if bias else None for n in "qkv")
        self.o_w = weights[p + "o_proj.weight"]
        self.o_b = weights[p + "o_proj.bias"] if bias else None
        self.q_norm_scale = zero_centred_scale(weights[p + "q_norm.weight"])  # 1 + w, made once
        self.k_norm_scale = zero_centred_scale(weights[p + "k_norm.weight"])

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, batch: StepInputs, caches,
                kv_observer: KVObserver | None = None) -> torch.Tensor:
        """x: [T, hidden]; cos, sin: [T, rotary_dim] float32 -> [T, hidden]."""
        t, d = x.shape[0], self.head_dim
        q_and_gate = linear(x, self.q_w, self.q_b)
        key, value = linear(x, self.k_w, self.k_b), linear(x, self.v_w, self.v_b)
        q_and_gate = q_and_gate.view(t, self.num_heads, 2 * d)
        query, gate = q_and_gate[..., :d], q_and_gate[..., d:]
        key = key.view(t, self.num_kv_heads, d)
        value = value.view(t, self.num_kv_heads, d)
        query = apply_rope(rms_norm_scaled(query, self.q_norm_scale, self.eps), cos, sin).contiguous()
        key = apply_rope(rms_norm_scaled(key, self.k_norm_scale, self.eps), cos, sin).contiguous()
        value = value.contiguous()
        if kv_observer is not None:
            kv_observer(self.layer, key, value)

        key_cache, value_cache = caches.key_caches[self.layer], caches.value_caches[self.layer]
        k_scale, v_scale = caches.k_scales.get(self.layer), caches.v_scales.get(self.layer)
        # Speculative verify rows (1 + k tokens) run as chunks: then no row is a one-token decode.
        num_decodes = getattr(batch, "num_attention_decodes", batch.num_decodes)
        if num_decodes == t and self._decodes_in_one_call(x.device):
            # A step of decodes only, on the CPU: the write and the attention in one C++ call.
            out = attention_decode_step(query, key, value, key_cache, value_cache, batch.slot_mapping,
                                        batch.block_tables, batch.seq_lens, k_scale=k_scale, v_scale=v_scale)
            return self._output(out, gate, t)
        ops.reshape_and_cache(key, value, key_cache, value_cache, batch.slot_mapping, k_scale, v_scale,
                              backend=self.backend("reshape_and_cache"))
        out = ops.mixed_attention(query, key, value, key_cache, value_cache, batch.block_tables,
                                  batch.query_start_loc, batch.seq_lens, num_decodes,
                                  k_scale=k_scale, v_scale=v_scale,
                                  backend=self.backend("mixed_attention"), prefill_units=batch.prefill_units)
        return self._output(out, gate, t)

    def _decodes_in_one_call(self, device: torch.device) -> bool:
        """Whether a decode-only step runs ``attention_decode_step``'s C++ operator: CPU tensors, the torch
        backend serving the cache write and the attention, ``qwen_ops._C`` built."""
        return takes_cpu_kernel(device, {"reshape_and_cache": self.backend("reshape_and_cache"),
                                         "paged_decode_attention": self.backend("mixed_attention")})

    def _output(self, attended: torch.Tensor, gate: torch.Tensor, t: int) -> torch.Tensor:
        out = attended.reshape(t, -1) * torch.sigmoid(gate.reshape(t, -1))
        return linear(out, self.o_w, self.o_b)
