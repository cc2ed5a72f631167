"""Several projections of the same input run as one ``linear`` over their concatenated weights.

A decode step multiplies one normed hidden state by several weights in a row: a GDN layer's
``in_proj_qkv``, ``in_proj_z``, ``in_proj_b``, ``in_proj_a``; an attention layer's q, k and v; an
MLP's gate and up. Stacking their rows into one [sum N_i, K] weight gives one call that streams
all of them (one parallel region and one pass over the input instead of several), and the output
columns are the same dot products: ``linear(x, cat(W_i))[:, rows of W_i] == linear(x, W_i)`` up to
the order of the float32 sums over K, which the projection kernel may choose per call.

Off by default: on the project's shared 2-core machine the stacked calls gave no measurable gain at
batch 1 (paired per step), and a model built this way took 4-7 % longer per decode step than the
unstacked one (bench/RESULTS.md, section "Decode step outside the projections"). Turn it on with
``QWEN_OPS_FUSED_PROJECTIONS=1`` or ``set_fused_projections(True)`` before loading: ``load_weights``
then lays each group out back to back in one buffer (``weights.fused_groups``), so the stacked weight
is a view of the loaded tensors, not a copy, and ``FusedProjection`` stacks them. The setting is also
read at every call: off, a stacked projection runs its parts one by one (views of the same buffer).
"""
from __future__ import annotations

import os
from typing import Sequence

import torch

from .layers import linear

FUSED_PROJECTIONS_ENV = "QWEN_OPS_FUSED_PROJECTIONS"
_fused_on = os.environ.get(FUSED_PROJECTIONS_ENV, "0") == "1"


def set_fused_projections(enabled: bool) -> bool:
    """Stack the projections of models loaded from now on and run stacked ones as one call (True), or
    load them apart and run every part on its own (False); returns the previous setting."""
    global _fused_on
    previous = _fused_on
    _fused_on = bool(enabled)
    return previous


def fused_projections_enabled() -> bool:
    """Whether weights loaded now are stacked (``set_fused_projections``)."""
    return _fused_on


def concat_rows(tensors: Sequence[torch.Tensor]) -> torch.Tensor:
    """``torch.cat(tensors, dim=0)``; a view of their storage, without copying, where they already lie there
    back to back (contiguous, one storage, each starting where the previous one ends), as ``load_weights``
    lays them out.

    tensors: [N_i, ...] of one dtype and device, with the same trailing shape.
    """
    first = tensors[0]
    rest = tuple(first.shape[1:])
    if any(t.dtype != first.dtype or t.device != first.device or tuple(t.shape[1:]) != rest for t in tensors):
        raise ValueError(f"concat_rows: tensors must share dtype, device and trailing shape, got "
                         f"{[(t.dtype, tuple(t.shape)) for t in tensors]}")
    rows = sum(t.shape[0] for t in tensors)
    adjacent = all(t.is_contiguous() for t in tensors) and all(
        t.untyped_storage().data_ptr() == first.untyped_storage().data_ptr() for t in tensors)
    offset = first.storage_offset()
    for t in tensors:
        adjacent = adjacent and t.storage_offset() == offset
        offset += t.numel()
    if not adjacent:
        return torch.cat(list(tensors))
    shape = (rows, *rest)
    strides = [1] * len(shape)
    for i in range(len(shape) - 2, -1, -1):
        strides[i] = strides[i + 1] * shape[i + 1]
    return first.as_strided(shape, strides, first.storage_offset())


class FusedProjection:
    """``x -> (linear(x, W_1, b_1), ..., linear(x, W_n, b_n))`` as one ``linear`` over the stacked weights.

    weights: [N_i, K] each (one dtype and device); biases: None, or one [N_i] per weight.
    Made while ``fused_projections_enabled()``: ``weight`` [sum N_i, K] is the stacked weight (a view of
    the inputs where ``concat_rows`` can make one) and ``parts`` are views of it, one per input weight, so
    that holding both costs no memory. Made while it is off: ``weight`` is None and ``parts`` are the
    inputs themselves.
    """

    def __init__(self, weights: Sequence[torch.Tensor], biases: Sequence[torch.Tensor] | None = None):
        if biases is not None and len(biases) != len(weights):
            raise ValueError(f"FusedProjection: {len(weights)} weights but {len(biases)} biases")
        self.sizes = tuple(int(w.shape[0]) for w in weights)
        self.weight = self.bias = None
        self.parts, self.part_biases = tuple(weights), tuple(biases) if biases is not None else (None,) * len(weights)
        if _fused_on:
            self.weight = concat_rows(weights)
            self.bias = concat_rows(biases) if biases is not None else None
            self.parts = self.weight.split(self.sizes)
            self.part_biases = self.bias.split(self.sizes) if self.bias is not None else (None,) * len(self.sizes)

    def __call__(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """x: [T, K] -> one [T, N_i] per weight (views of one [T, sum N_i] output when stacked: not
        contiguous for T > 1)."""
        if _fused_on and self.weight is not None:
            return linear(x, self.weight, self.bias).split(self.sizes, dim=-1)
        return tuple(linear(x, w, b) for w, b in zip(self.parts, self.part_biases))
