"""Qwen3.5's dense MLP with its gate and up projections run as one ``FusedProjection``."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from .fused_projection import FusedProjection
from .layers import linear


class DenseMLP:
    """``down(silu(gate(x)) * up(x))``, as ``layers.swiglu_mlp``, with gate and up as one call.

    gate_w, up_w: [I, H]; down_w: [H, I]. ``gate_w`` and ``up_w`` stay reachable as views of the stacked
    weight (``gate_up.parts``).
    """

    def __init__(self, gate_w: torch.Tensor, up_w: torch.Tensor, down_w: torch.Tensor):
        # The order of weights.fused_groups, so that the stacked weight is a view of the loaded ones.
        self.gate_up = FusedProjection([gate_w, up_w])
        self.down_w = down_w

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        """x: [T, H] -> [T, H]."""
        gate, up = self.gate_up(x)
        return linear(F.silu(gate) * up, self.down_w)
