"""The C++ one-pass KV cache write (``qwen_ops._C.reshape_and_cache_cpu``), where it applies.

``bindings/cpu/reshape_and_cache_cpu.cpp`` reads each token's [Hkv, D] rows
once and writes them once where their slot lands, quantizing INT8 caches on
the way (the op's floor), where the torch form builds an index tensor of cache
rows and, for INT8, makes five elementwise passes per tile before its
``index_copy_``; one C++ call also replaces the torch form's several small
torch calls at decode batch 1. ``vectorized_write.py`` calls :func:`write_step`
first and runs its torch form whenever this returns False: no extension
(``QWEN_OPS_BUILD_EXT=0``) or tensors not on the CPU. Bit-identical to the
reference (the same float32 division, NaN/inf mapping, round-half-even and
clamp); tested against it (``tests/ops/test_vectorized_cpu_forms.py``).
"""
from __future__ import annotations

import torch

from .._cpu_kernels import cpu_kernel

F32 = torch.float32


def _kernel():
    return cpu_kernel("reshape_and_cache_cpu")


def write_step(*, key, value, key_cache, value_cache, slot_mapping, k_scale, v_scale) -> bool:
    """Write key/value [T, Hkv, D] to their slots ([T], -1 = skip) with the kernel; False where it does not apply.

    Arguments as ``vectorized_write.reshape_and_cache`` (validated by the op).
    """
    kernel = _kernel()
    if kernel is None or key.device.type != "cpu" or not (key_cache.is_contiguous() and value_cache.is_contiguous()):
        return False
    if key_cache.dtype == torch.int8:  # the reference divides in float32: 16-bit inputs are widened exactly first
        key, value = key.to(F32), value.to(F32)
    kernel(key.contiguous(), value.contiguous(), key_cache, value_cache, slot_mapping.to(torch.int64).contiguous(),
           k_scale, v_scale)
    return True
