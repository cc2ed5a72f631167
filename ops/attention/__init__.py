"""Attention over the paged KV cache: decode (BNSD), prefill (TND) and mixed batches."""
from .op import mixed_attention, paged_decode_attention, prefill_attention  # noqa: F401
