"""Benchmarks of ``fused_experts``, the routed experts of a MoE layer.

Qwen3.5-35B-A3B's expert shape: hidden 2048, 256 experts of width 512, top-8.
Decode batches of 1 to 256 tokens (weights streamed: the time follows the
experts the batch touches) and a 2048-token prefill chunk (every expert busy).
Routing: K distinct random experts per token. ``QWEN_OPS_BENCH_QUICK=1``
shrinks it to 8 experts of width 16. Rows: every backend (torch, triton,
ascendc); on the CPU the triton row (interpreter) and the ascendc row (the
Ascend C stand-in simulator, whose speed is not a device's) are skipped with
that reason and timed only on a GPU / an NPU.
"""
from __future__ import annotations

import pytest
import torch

import kbench
from kbench import DTYPE, pick
from qwen_ops import ops

HIDDEN = pick(2048, 32)
INTER = pick(512, 16)
EXPERTS = pick(256, 8)
TOP_K = pick(8, 2)


@pytest.mark.parametrize("backend", kbench.backends("fused_experts"))
@pytest.mark.parametrize("tokens", pick([1, 32, 256, 2048], [5]))
def test_fused_experts(benchmark, backend, tokens):
    weight_bytes = EXPERTS * 3 * INTER * HIDDEN * torch.empty((), dtype=DTYPE).element_size()
    kbench.require_memory(2 * weight_bytes, f"fused_experts with {EXPERTS} experts")
    gen = kbench.generator()
    x = kbench.randn(tokens, HIDDEN, gen=gen)
    w13 = kbench.randn(EXPERTS, 2 * INTER, HIDDEN, gen=gen, scale=HIDDEN ** -0.5)
    w2 = kbench.randn(EXPERTS, HIDDEN, INTER, gen=gen, scale=INTER ** -0.5)
    scores = gen.uniform(tokens, EXPERTS, dtype=torch.float32)
    weights, ids = torch.topk(scores, TOP_K, dim=-1)
    weights = (weights / weights.sum(-1, keepdim=True)).to(DTYPE)
    kbench.run(benchmark, lambda: ops.fused_experts(x, w13, w2, weights, ids, backend=backend),
               tokens=tokens, hidden=HIDDEN, intermediate=INTER, experts=EXPERTS, top_k=TOP_K,
               experts_touched=int(torch.unique(ids).numel()))
