"""Paged KV cache: writing new tokens into it, with optional INT8 quantization."""
from .op import dequantize_int8, kv_scales_from_absmax, quantize_int8, reshape_and_cache  # noqa: F401
