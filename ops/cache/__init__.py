"""Paged KV cache: writing new tokens into it, with optional INT8 quantization."""
from .op import kv_scales_from_absmax, reshape_and_cache  # noqa: F401
from .reference import dequantize_int8, quantize_int8  # noqa: F401
