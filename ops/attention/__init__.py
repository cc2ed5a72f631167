"""Attention over the paged KV cache: decode (BNSD), prefill (TND) and mixed batches."""
from .decode_step_op import attention_decode_step  # noqa: F401
from .op import mixed_attention, paged_decode_attention, prefill_attention, prefill_units_for  # noqa: F401
