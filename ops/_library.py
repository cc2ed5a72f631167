"""Registration of the ops with ``torch.library`` as ``torch.ops.qwen_ops.<name>``.

Each op is a ``torch.library.custom_op`` whose real implementation validates
the arguments and dispatches to a backend, and whose fake implementation runs
the shape-only checks and returns empty tensors of the right shape, so that an
engine calling the ops can be traced by ``torch.compile(fullgraph=True)``.
"""
from __future__ import annotations

import math

import torch

NAMESPACE = "qwen_ops"


def custom_op(name: str, mutates_args=()):
    """``torch.library.custom_op`` under the project namespace."""
    return torch.library.custom_op(f"{NAMESPACE}::{name}", mutates_args=mutates_args)


def resolved_scale(op: str, scale: float | None, head_dim: int) -> float:
    """Softmax / GDN scale: ``head_dim ** -0.5`` unless given; a given one must be finite and > 0."""
    if scale is None:
        return float(head_dim) ** -0.5
    if not math.isfinite(scale) or scale <= 0:
        raise ValueError(f"{op}: argument 'scale' must be a finite number > 0, got {scale!r}")
    return float(scale)
