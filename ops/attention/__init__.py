"""Attention over the paged KV cache: decode (BNSD), prefill (TND) and mixed batches."""
from .op import mixed_attention, paged_decode_attention, prefill_attention, prefill_units_for  # noqa: F401
