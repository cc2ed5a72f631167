"""The C++ decode step of the gated delta rule (``qwen_ops._C.gdn_recurrent_decode_cpu``), where it applies.

``bindings/cpu/gdn_recurrent_decode.cpp`` advances each (sequence, value head)
state of a float32 pool in place, reading and writing every used pool row
once (the op's floor), where the torch form gathers, advances and scatters
them. ``vectorized_recurrent.py`` calls :func:`decode_step` first and runs its
torch form whenever this returns None: no extension (``QWEN_OPS_BUILD_EXT=0``),
or a call outside the kernel's case (one token per sequence, not packed, a
pool with 1-D indices, no final state asked for, CPU tensors). Same
arithmetic as the torch form (see its docstring), so the two agree to float32
rounding; tested against the reference (``tests/ops/test_vectorized_cpu_forms.py``).
"""
from __future__ import annotations

import torch

from .._cpu_kernels import cpu_kernel
from .reference_recurrent import l2normalize

F32 = torch.float32


def _kernel():
    return cpu_kernel("gdn_recurrent_decode_cpu")


def decode_step(*, q, k, v, g, beta, scale, initial_state, output_final_state, cu_seqlens, ssm_state_indices,
                has_initial_state, use_qk_l2norm_in_kernel):
    """``(o [B, 1, Hv, Dv] in v's dtype, None)`` from the kernel, writing the pool rows; None where it does not apply.

    Arguments as ``vectorized_recurrent.fused_recurrent_gated_delta_rule`` (validated by the op).
    """
    kernel = _kernel()
    if (kernel is None or q.shape[1] != 1 or cu_seqlens is not None or output_final_state
            or ssm_state_indices is None or ssm_state_indices.dim() != 1 or q.device.type != "cpu"
            or initial_state.dtype != F32 or not initial_state.is_contiguous()):
        return None
    if use_qk_l2norm_in_kernel:
        q, k = l2normalize(q), l2normalize(k)
    slots = ssm_state_indices.to(torch.int64).contiguous()
    if has_initial_state is None:
        fresh = torch.zeros(slots.shape, dtype=torch.bool)
    else:
        fresh = ~has_initial_state.to(torch.bool).contiguous()
    batch, num_v_heads, dv = v.shape[0], v.shape[2], v.shape[3]
    out = torch.empty(batch, num_v_heads, dv, dtype=F32)
    kernel((q[:, 0].to(F32) * scale).contiguous(), k[:, 0].to(F32).contiguous(), v[:, 0].to(F32).contiguous(),
           g[:, 0].to(F32).contiguous(), beta[:, 0].to(F32).contiguous(), initial_state, slots, fresh, out)
    return out[:, None].to(v.dtype), None
