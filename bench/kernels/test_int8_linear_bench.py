"""Benchmarks of ``int8_linear``, the INT8-weight projections (W8A8 and weight-only).

Qwen3.5-0.8B's MLP gate/up projection ([3584, 1024]) at decode batches of 1 and 16 rows and a 512-token
prefill; W8A8 includes the per-token activation quantization. ``QWEN_OPS_BENCH_QUICK=1`` shrinks it to
[48, 32] and 5 rows.
"""
from __future__ import annotations

import pytest
import torch

import kbench
from kbench import DTYPE, pick
from qwen_ops import ops

N = pick(3584, 48)
K = pick(1024, 32)


@pytest.mark.parametrize("backend", kbench.backends("int8_linear"))
@pytest.mark.parametrize("form", ["W8A8", "weight-only"])
@pytest.mark.parametrize("rows", pick([1, 16, 512], [5]))
def test_int8_linear(benchmark, backend, form, rows):
    gen = kbench.generator()
    x = kbench.randn(rows, K, gen=gen)
    weight = torch.randint(-127, 128, (N, K), dtype=torch.int8).to(x.device)
    scale = torch.full((N,), 0.01, device=x.device)

    def call():
        if form == "W8A8":
            q, token_scale = ops.quantize_per_token(x)
            return ops.int8_linear(q, weight, scale, x_scale=token_scale, out_dtype=DTYPE, backend=backend)
        return ops.int8_linear(x, weight, scale, backend=backend)

    kbench.run(benchmark, call, rows=rows, n=N, k=K, form=form, weight_bytes=N * K)
