"""The Ascend C GDN kernel on padding sequences and on the pool rows no sequence names.

A padding sequence (state index -1) outputs zeros, has a zero final state,
and reads and writes no pool row; pool rows no sequence names stay exactly
as they were. The outputs are allocated uninitialised inside the binding,
so the call runs under :func:`~qwen_ops.testing.poisoned_memory.poisoned_allocations`:
a row the kernel forgot to write holds 3.4e38 (float16: NaN), not the zeros
the OS happens to hand out. Unused pool rows hold a sentinel value before
the call and must hold it bit for bit after.
"""
from __future__ import annotations

import pytest
import torch

import qwen_ops.ops as ops
from qwen_ops.ops import _backend
from qwen_ops.testing import Draw, gdn_inputs, offsets, state_pool
from qwen_ops.testing.poisoned_memory import poisoned_allocations, poisoning_available
from tolerances import KERNEL_VS_REFERENCE, tol

if "ascendc" not in _backend.available_backends():  # pragma: no cover - the extension is part of the build
    pytest.skip("qwen_ops._C was built without the Ascend C kernels", allow_module_level=True)
if not poisoning_available():  # pragma: no cover - every machine of this project runs glibc
    pytest.skip("poisoning fresh allocations needs glibc's mallopt", allow_module_level=True)

SENTINEL = -777.25  # exact in every float dtype; no state the kernel computes is this
POOL_ROWS = 8
INDICES = [6, -1, 0, 3, 7]  # sequence 1 is padding; rows 1, 2, 4, 5 are nobody's
UNUSED = [r for r in range(POOL_ROWS) if r not in INDICES]


def _run(backend, inputs, pool, lengths, **kwargs):
    state = pool.clone()
    o, final = ops.fused_recurrent_gated_delta_rule(
        *inputs, initial_state=state, output_final_state=True, cu_seqlens=offsets(lengths),
        ssm_state_indices=torch.tensor(INDICES, dtype=torch.int32), backend=backend, **kwargs)
    return o, final, state


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("lengths", [[1] * 5, [3, 2, 1, 4, 2]], ids=["decode", "varlen"])
def test_padding_sequence_and_unused_pool_rows(gen, dtype, lengths):
    draw = Draw(gen)
    hk, hv, dk, dv = 2, 4, 64, 64
    inputs = gdn_inputs(draw, batch=1, tokens=sum(lengths), hk=hk, hv=hv, dk=dk, dv=dv, dtype=dtype)
    pool = state_pool(draw, POOL_ROWS, hv, dk, dv, scale=0.1)
    pool[UNUSED] = SENTINEL
    kwargs = dict(scale=dk ** -0.5, has_initial_state=torch.tensor([True, True, False, True, True]),
                  use_qk_l2norm_in_kernel=True)

    want_o, want_final, want_pool = _run("torch", inputs, pool, lengths, **kwargs)
    with poisoned_allocations():
        o, final, got_pool = _run("ascendc", inputs, pool, lengths, **kwargs)

    pad = slice(lengths[0], lengths[0] + lengths[1])
    assert torch.equal(o[0, pad], torch.zeros_like(o[0, pad])), "a padding sequence outputs zeros"
    assert torch.equal(final[1], torch.zeros_like(final[1])), "a padding sequence has a zero final state"
    assert torch.equal(got_pool[UNUSED], pool[UNUSED]), "pool rows no sequence names must not change"
    state_tol = tol(KERNEL_VS_REFERENCE, torch.float32 if dtype == torch.float32 else dtype)
    torch.testing.assert_close(o.float(), want_o.float(), **tol(KERNEL_VS_REFERENCE, dtype))
    torch.testing.assert_close(final, want_final, **state_tol)
    torch.testing.assert_close(got_pool, want_pool, **state_tol)
