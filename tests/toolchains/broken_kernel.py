"""A deliberately broken Triton kernel: the compiler checks must report it by name with its first error.

``tl.dot`` of a [16, 16] by a [32, 16] tile: the inner dimensions differ, which
every Triton front end rejects (CUDA's, triton-ascend's).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from qwen_ops.ops._triton import configured, recorded_launches


@configured(fixed=lambda **_: {"BLOCK": 16}, cuda_configs=[{"BLOCK": 16, "num_warps": 4}])
@triton.jit
def _broken_dot_kernel(x, out, BLOCK: tl.constexpr):
    rows = tl.arange(0, BLOCK)
    a = tl.load(x + rows[:, None] * BLOCK + rows[None, :])
    b = tl.load(x + tl.arange(0, 2 * BLOCK)[:, None] * BLOCK + rows[None, :])
    tl.store(out + rows[:, None] * BLOCK + rows[None, :], tl.dot(a, b))


def broken_launches(target: str) -> list:
    """The recorded launch of ``_broken_dot_kernel`` on ``target``, as ``triton_launches.Launch`` objects."""
    import triton_launches

    x = torch.zeros(32, 16, dtype=torch.float16)
    out = torch.empty(16, 16, dtype=torch.float16)
    with recorded_launches(target, 4) as recorded:
        _broken_dot_kernel.launch(x.device, 1, x, out)
    return [triton_launches.Launch(r.kernel, r.target, r.grid, r.args, r.kwargs, r.configs, ["broken kernel test"])
            for r in recorded]
