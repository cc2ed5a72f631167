"""The C++ paged decode attention (``qwen_ops._C.paged_decode_attention_cpu``), where it applies.

``bindings/cpu/paged_decode_attention_cpu.cpp`` walks each (request, KV head)
pair's blocks where they lie in the cache, with an online softmax, so every
cached K and V byte is read once (the op's floor), where the torch form
gathers the blocks of a tile of requests into a buffer and runs two bmms
over it. ``vectorized_decode.py`` calls :func:`decode_step` first and runs its
torch form whenever this returns None: no extension (``QWEN_OPS_BUILD_EXT=0``),
tensors not on the CPU, or a float16 cache (the kernel reads float32, int8 and
bfloat16 caches, widening the last two to float32 in registers). The kernel's
pair loop is compiled per instruction set (AVX-512F,
AVX2 + FMA, portable; the widest the CPU runs is chosen at run time): INT8
K/V widened in registers, the softmax's exponentials vectorised (within
about 2 ulp). The same arithmetic as the torch form (INT8 scales moved onto
the query and output rows) in a different summation order: the two agree to
float32 rounding; tested against the reference
(``tests/ops/test_vectorized_attention.py``, every variant in
``tests/ops/test_kv_kernel_isas.py``).
"""
from __future__ import annotations

import torch

from .._cpu_kernels import cpu_kernel

F32 = torch.float32
I32 = torch.int32


def _kernel():
    return cpu_kernel("paged_decode_attention_cpu")


def decode_step(*, query, key_cache, value_cache, block_tables, seq_lens, scale, k_scale=None, v_scale=None):
    """[N, Hq, D] in query's dtype from the kernel; None where it does not apply.

    Arguments as ``vectorized_decode.paged_decode_attention`` (validated by the op).
    """
    kernel = _kernel()
    if (kernel is None or query.device.type != "cpu" or key_cache.dtype not in (F32, torch.int8, torch.bfloat16)
            or not (key_cache.is_contiguous() and value_cache.is_contiguous())):
        return None
    query32 = query.to(F32).contiguous()
    out = torch.empty(query32.shape, dtype=F32)
    kernel(query32, key_cache, value_cache, block_tables.to(I32).contiguous(), seq_lens.to(I32).contiguous(),
           float(scale), k_scale, v_scale, out)
    return out if query.dtype == F32 else out.to(query.dtype)
