"""The C++ one-token conv update (``qwen_ops._C.causal_conv1d_update_cpu``), where it applies.

``bindings/cpu/causal_conv1d_update_cpu.cpp`` reads, shifts and writes each
used row of a float32 state pool in place, with x and the output crossing
memory once (the op's floor), where the torch form gathers the rows, makes K
passes over [B, C] and scatters them back. The kernel reads the weight in its
own [C, K] layout, so a float32 weight is passed as it is (no per-call
transposed copy). ``vectorized_update.py`` calls :func:`update_step` first
and runs its torch form whenever this returns None: no extension
(``QWEN_OPS_BUILD_EXT=0``), a pool that is not float32, or the
speculative-decoding form. Same order of operations as the torch form, so the
two agree to float32 rounding; tested against
the reference (``tests/ops/test_vectorized_cpu_forms.py``).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from .._cpu_kernels import cpu_kernel

F32 = torch.float32


def _kernel():
    return cpu_kernel("causal_conv1d_update_cpu")


def update_step(*, x, conv_states, weight, bias, cache_indices, activation):
    """[B, C] output in x's dtype from the kernel, the pool rows shifted in place; None where it does not apply.

    Arguments as ``vectorized_update.causal_conv1d_update`` (validated by the op), without the spec-decode form.
    """
    kernel = _kernel()
    if kernel is None or x.device.type != "cpu" or conv_states.dtype != F32 or not conv_states.is_contiguous():
        return None
    out = torch.empty(x.shape, dtype=F32)
    kernel(x.to(F32).contiguous(), conv_states, weight.to(F32).contiguous(),
           None if bias is None else bias.to(F32).contiguous(), cache_indices.to(torch.int64).contiguous(), out)
    if activation == "silu":  # torch's vectorised exp; padding rows stay zero (silu(0) = 0)
        F.silu(out, inplace=True)
    return out.to(x.dtype)
