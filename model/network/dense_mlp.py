"""Qwen3.5's dense MLP block: the layer's gate, up and down weights and ``layers.swiglu_mlp`` over them."""
from __future__ import annotations

import torch

from .layers import swiglu_mlp


class DenseMLP:
    """``down(silu(gate(x)) * up(x))`` (``layers.swiglu_mlp``). gate_w, up_w: [I, H]; down_w: [H, I]."""

    def __init__(self, gate_w: torch.Tensor, up_w: torch.Tensor, down_w: torch.Tensor):
        self.gate_w, self.up_w, self.down_w = gate_w, up_w, down_w

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        """x: [T, H] -> [T, H]."""
        return swiglu_mlp(x, self.gate_w, self.up_w, self.down_w)
