"""The sparse MoE block of Qwen3.5 MoE (every decoder layer's MLP), as transformers 5.24 computes it.

    router:  logits = x @ gate.T;  probs = softmax(logits) in float32;
             (w, ids) = top-k(probs);  w /= sum(w)  (always renormalised: 5.24 has
             no ``norm_topk_prob``), then rounded to x's dtype
    experts: sum_k w[k] * SwiGLU_{ids[k]}(x)      -> ``qwen_ops.ops.fused_experts``
    shared:  sigmoid(x @ shared_expert_gate.T) * SwiGLU_shared(x)
    out = experts + shared

The expert op groups the tokens by expert (one sort per layer) and runs one
grouped GEMM per projection; nothing here loops over tokens.
"""
from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F

from ... import ops
from ...ops._backend import BackendError, resolved_backend
from ...ops.ascendc_backend import check_fused_experts
from ..loading.config import Qwen35Config
from .backends import backend_chooser
from .layers import swiglu_mlp

# Called with (layer, topk_ids [T, K], topk_weights [T, K]) after each layer's routing.
RoutingObserver = Callable[[int, torch.Tensor, torch.Tensor], None]


def route(x: torch.Tensor, router_weight: torch.Tensor, top_k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Top-k routing: ``(topk_weights [T, K] in x's dtype, topk_ids [T, K] int64)``.

    x: [T, H]; router_weight: [E, H]. Softmax in float32 over all E experts,
    top-k (largest first, as ``torch.topk``), renormalised to sum 1.
    """
    probs = torch.softmax(F.linear(x, router_weight), dim=-1, dtype=torch.float32)
    weights, ids = torch.topk(probs, top_k, dim=-1)
    weights = weights / weights.sum(dim=-1, keepdim=True)
    return weights.to(x.dtype), ids


class SparseMoeBlock:
    """One layer's router, routed experts (fused layout) and gated shared expert."""

    def __init__(self, config: Qwen35Config, layer: int, weights: dict[str, torch.Tensor], backend: str | None):
        m = f"layers.{layer}.mlp."
        self.layer = layer
        self.top_k = config.num_experts_per_tok
        self.router = weights[m + "gate.weight"]
        self.w13 = weights[m + "experts.gate_up_proj"]
        self.w2 = weights[m + "experts.down_proj"]
        self.shared = (weights[m + "shared_expert.gate_proj.weight"], weights[m + "shared_expert.up_proj.weight"],
                       weights[m + "shared_expert.down_proj.weight"])
        self.shared_gate = weights[m + "shared_expert_gate.weight"]
        self.backend = backend_chooser(backend)("fused_experts")
        self._check_kernel_limits()

    def _check_kernel_limits(self) -> None:
        """Sizes the expert kernel that will serve this layer cannot hold are refused now, not mid-generation."""
        try:
            chosen = resolved_backend("fused_experts", self.backend, self.w13.device)
        except BackendError:
            return  # the call itself raises with its reason
        if chosen == "ascendc":
            check_fused_experts(hidden=self.w13.shape[2], inter=self.w2.shape[2], dtype=self.w13.dtype)

    def forward(self, x: torch.Tensor, observer: RoutingObserver | None = None) -> torch.Tensor:
        """x: [T, H] (the post-attention norm's output) -> [T, H]."""
        topk_weights, topk_ids = route(x, self.router, self.top_k)
        if observer is not None:
            observer(self.layer, topk_ids, topk_weights)
        routed = ops.fused_experts(x, self.w13, self.w2, topk_weights, topk_ids, backend=self.backend)
        shared = torch.sigmoid(F.linear(x, self.shared_gate)) * swiglu_mlp(x, *self.shared)
        return routed + shared
