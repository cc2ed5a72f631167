"""The chunked gated delta rule with the Triton chunk kernels' roundings, in torch (a test model of the kernels).

``ops/gdn/triton_chunk.py`` gives every ``tl.dot`` its operands in the model's
dtype (bfloat16/float16) and accumulates in float32; everything else is
float32. This file is ``ops/gdn/reference_chunk.py``'s algorithm with the
same operands rounded at the same points, so that a kernel run can be compared
with what its roundings alone explain, and so that the error those roundings
cause against the float32 reference can be measured on the CPU, for bfloat16
rounded to nearest as on a device (Triton's interpreter truncates: the model
does so too when asked, to be compared with a kernel run under it).

Rounded (to ``dot_dtype`` and back): ``Tinv diag(beta Gam)`` and ``Tinv diag(beta)``
(the w/u launch's left operands), w and Aqk (stored in the dot dtype), the
state S at each chunk start, v_new and ``diag(exp(G_L - G)) v_new``. q, k and v
enter as given (the callers pass values already in ``dot_dtype``, unit-norm k,
no in-kernel l2norm: the kernel's 1/|k| factors are not modelled).
"""
from __future__ import annotations

import torch

from qwen_ops.ops.gdn.reference_chunk import CHUNK_SIZE, _to_chunks, unit_lower_inverse
from qwen_ops.ops.gdn.reference_recurrent import run_per_sequence


def _truncate_to_bfloat16(x: torch.Tensor) -> torch.Tensor:
    """float32 -> bfloat16 -> float32 by dropping the low 16 bits, as Triton's interpreter converts."""
    return (x.to(torch.float32).view(torch.int32) & -65536).view(torch.float32)


def _rounder(dot_dtype: torch.dtype, truncate: bool):
    if truncate:
        if dot_dtype != torch.bfloat16:
            raise ValueError(f"truncate: only the bfloat16 conversion truncates under the interpreter, not {dot_dtype}")
        return _truncate_to_bfloat16
    return lambda x: x.to(dot_dtype).to(torch.float32)


def rounded_chunk_sequence(dot_dtype: torch.dtype, truncate: bool = False):
    """A ``SequenceFn`` (see ``reference_recurrent.py``): one sequence with the kernels' roundings to ``dot_dtype``.

    ``truncate``: convert to bfloat16 by truncation, as the kernels do under Triton's interpreter
    (``tests/tolerances.py: INTERPRETER_FP32_TO_BF16``), instead of rounding to nearest as on a device.
    """
    rnd = _rounder(dot_dtype, truncate)

    def sequence(q, k, v, g, beta, state):
        length = q.shape[0]
        num_chunks = -(-length // CHUNK_SIZE)
        q, k, v, g, beta = (_to_chunks(x, num_chunks) for x in (q, k, v, g, beta))  # [n, H, C, ...]
        gc = g.cumsum(dim=-1)
        rows = torch.arange(CHUNK_SIZE, device=q.device)
        log_decay = gc[..., :, None] - gc[..., None, :]
        decay_causal = torch.exp(log_decay.masked_fill(rows[:, None] < rows[None, :], float("-inf")))
        decay_strict = torch.exp(log_decay.masked_fill(rows[:, None] <= rows[None, :], float("-inf")))
        t = unit_lower_inverse(beta[..., :, None] * decay_strict * (k @ k.transpose(-1, -2)))
        w = rnd(rnd(t * (beta * torch.exp(gc))[..., None, :]) @ k)
        u = rnd(t * beta[..., None, :]) @ v
        attention = rnd((q @ k.transpose(-1, -2)) * decay_causal)
        q_gain = torch.exp(gc)[..., None]
        k_gain = torch.exp(gc[..., -1:] - gc)[..., None]
        chunk_decay = torch.exp(gc[..., -1])[..., None, None]
        o = torch.empty_like(v)
        for c in range(num_chunks):
            state_dot = rnd(state)
            v_new = u[c] - w[c] @ state_dot
            o[c] = q_gain[c] * (q[c] @ state_dot) + attention[c] @ rnd(v_new)
            state = chunk_decay[c] * state + k[c].transpose(-1, -2) @ rnd(v_new * k_gain[c])
        return o.transpose(1, 2).reshape(-1, o.shape[1], o.shape[3])[:length], state

    return sequence


def rounded_chunk_gated_delta_rule(dot_dtype: torch.dtype, truncate: bool = False, **op_arguments):
    """``chunk_gated_delta_rule``'s arguments and result (as ``run_per_sequence``), with the kernels' roundings."""
    return run_per_sequence(rounded_chunk_sequence(dot_dtype, truncate), **op_arguments)
