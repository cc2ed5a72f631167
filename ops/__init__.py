"""qwen_ops.ops: the kernels of Qwen3.5's hybrid model behind one API.

Each op lives in its own folder with its torch reference beside its kernels:

* ``cache``: ``reshape_and_cache`` (paged BNSD KV cache, INT8 per channel)
* ``attention``: ``paged_decode_attention``, ``prefill_attention``, ``mixed_attention``,
  ``attention_decode_step`` (a decode step's cache write and attention in one call)
* ``gdn``: ``chunk_gated_delta_rule``, ``fused_recurrent_gated_delta_rule``, ``fused_gdn_gating``,
  ``gdn_decode_step`` (a GDN layer's decode step in one call)
* ``conv``: ``causal_conv1d_fn``, ``causal_conv1d_update``
* ``moe``: ``fused_experts`` (the routed experts of a MoE layer)
* ``int8_linear``: ``int8_linear`` (INT8-weight projections, W8A8 and weight-only), ``quantize_per_token``,
  ``quantize_static``

Every op takes ``backend=None`` ("torch", "triton", "ascendc"); see
``available_backends()`` and ``qwen_ops.ops._backend``. Every op is also
registered as ``torch.ops.qwen_ops.<name>`` with a fake implementation, so
callers can be compiled with ``torch.compile``.

Every op checks shapes, dtypes and devices on every call, and metadata values
(block ids, slots, lengths, pool indices) on CPU tensors, on a device only with
``QWEN_OPS_CHECK_VALUES=1``, and never inside ``trusted_metadata()``, which an
engine enters after checking the step once on the host (see ``_validate``).
"""
from ._backend import BackendError, available_backends  # noqa: F401
from ._validate import CHECK_VALUES_ENV, trusted_metadata, values_checked  # noqa: F401
from .attention import (attention_decode_step, mixed_attention, paged_decode_attention, prefill_attention,  # noqa: F401
                        prefill_units_for)
from .cache import dequantize_int8, kv_scales_from_absmax, quantize_int8, reshape_and_cache  # noqa: F401
from .conv import causal_conv1d_fn, causal_conv1d_update  # noqa: F401
from .gdn import (chunk_gated_delta_rule, fused_gdn_gating, fused_recurrent_gated_delta_rule,  # noqa: F401
                  gdn_decode_step, prepare_chunk_indices)
from .int8_linear import int8_linear, quantize_per_token, quantize_static  # noqa: F401
from .moe import fused_experts  # noqa: F401

__all__ = [
    "BackendError",
    "available_backends",
    "trusted_metadata",
    "values_checked",
    "CHECK_VALUES_ENV",
    "reshape_and_cache",
    "kv_scales_from_absmax",
    "quantize_int8",
    "dequantize_int8",
    "paged_decode_attention",
    "prefill_attention",
    "mixed_attention",
    "attention_decode_step",
    "prefill_units_for",
    "chunk_gated_delta_rule",
    "fused_recurrent_gated_delta_rule",
    "fused_gdn_gating",
    "gdn_decode_step",
    "prepare_chunk_indices",
    "causal_conv1d_fn",
    "causal_conv1d_update",
    "fused_experts",
    "int8_linear",
    "quantize_per_token",
    "quantize_static",
]
