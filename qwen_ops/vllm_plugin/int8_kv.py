"""``kv_cache_dtype="int8"``: a KV-cache dtype that the plug-in's attention backend owns.

vLLM 0.33 lets a backend add a ``--kv-cache-dtype`` value with
``vllm.config.cache.register_kv_cache_dtype``: the name joins vLLM's list of
valid values, its storage dtype (``torch.int8``) sizes and allocates the
cache, and ``KVQuantMode.CUSTOM`` tells vLLM that no generic kernel path
applies (the backend quantizes itself). The plug-in's backend stores keys and
values as the project's symmetric per-channel INT8 (one scale per KV head and
channel, round half to even); see :mod:`.attention_backend` for where the
scales come from.
"""
from __future__ import annotations

import torch

INT8_KV_CACHE_DTYPE = "int8"


class QwenOpsInt8KVCacheDType:
    name = INT8_KV_CACHE_DTYPE

    def torch_dtype(self) -> torch.dtype:
        return torch.int8

    def quant_mode(self):
        from vllm.v1.kv_cache_interface import KVQuantMode

        return KVQuantMode.CUSTOM


def register_int8_kv_cache_dtype() -> bool:
    """Register ``int8`` with vLLM; False (and a log line: the float cache stays) where vLLM has no such hook."""
    from vllm.logger import init_logger

    log = init_logger("vllm.qwen_ops_plugin")
    try:
        from vllm.config.cache import get_kv_cache_dtype_handler, register_kv_cache_dtype
    except ImportError:
        log.warning("qwen_ops plug-in: this vLLM cannot register a backend-owned kv_cache_dtype; "
                    "kv_cache_dtype='int8' is unavailable and the float KV cache is used")
        return False
    if get_kv_cache_dtype_handler(INT8_KV_CACHE_DTYPE) is None:
        register_kv_cache_dtype(INT8_KV_CACHE_DTYPE)(QwenOpsInt8KVCacheDType)
    return True
