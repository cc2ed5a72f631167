"""Benchmarks of the GDN (gated delta rule) ops and their gating.

Qwen3.5 GDN layers: 16 key heads and 32 value heads of dim 128, q/k
l2-normalised in the kernel, states in a pool. Prefill chunks of 512 to 8192
tokens through ``chunk_gated_delta_rule``; decode batches of 1 to 256 through
``fused_recurrent_gated_delta_rule``; ``fused_gdn_gating`` for both; a layer's whole decode step in one
call through ``gdn_decode_step`` (float32, its only dtype; against the separate ops:
``bench_gdn_decode_step.py``).
``QWEN_OPS_BENCH_QUICK=1`` shrinks all of it (see kbench.py).
"""
from __future__ import annotations

import pytest
import torch

import kbench
from kbench import DEVICE, DTYPE, pick
from qwen_ops import ops
from qwen_ops.testing import SHAPES, decode_step_call, gating_inputs, gdn_inputs, pool_indices, state_pool

QWEN = SHAPES["qwen3.5"]
HK, HV, DK, DV = pick((QWEN.hk, QWEN.hv, QWEN.dk, QWEN.dv), (1, 2, 32, 32))


def delta_rule_inputs(gen, batch, tokens):
    """q, k, v, g, beta in the benchmark dtype (g float32); q and k are normalised in the kernel."""
    return gdn_inputs(gen, batch=batch, tokens=tokens, hk=HK, hv=HV, dk=DK, dv=DV, dtype=DTYPE, l2norm_in_kernel=True)


@pytest.mark.parametrize("backend", kbench.backends("chunk_gated_delta_rule"))
@pytest.mark.parametrize("sequences", pick([1, 4], [2]))
@pytest.mark.parametrize("tokens", pick([512, 2048, 8192], [70]))
def test_chunk_gated_delta_rule(benchmark, backend, sequences, tokens):
    """``tokens`` split evenly over ``sequences`` packed ones, each starting from a pool row."""
    gen = kbench.generator()
    kbench.require_memory(tokens * (2 * HK * DK + 3 * HV * DV) * 4 * 4, "inputs and workspaces")
    q, k, v, g, beta = delta_rule_inputs(gen, 1, tokens)
    lengths = [tokens // sequences] * (sequences - 1)
    lengths.append(tokens - sum(lengths))
    pool = state_pool(gen, sequences, HV, DK, DV, scale=0.1)
    indices = torch.arange(sequences, dtype=torch.int32, device=DEVICE)
    cu = kbench.offsets(lengths)
    kbench.run(benchmark, lambda: ops.chunk_gated_delta_rule(q, k, v, g, beta, initial_state=pool, cu_seqlens=cu,
                                                             ssm_state_indices=indices, use_qk_l2norm_in_kernel=True,
                                                             backend=backend),
               tokens=tokens, sequences=sequences, heads_k=HK, heads_v=HV, head_dim=DK)


@pytest.mark.parametrize("backend", kbench.backends("fused_recurrent_gated_delta_rule"))
@pytest.mark.parametrize("batch", pick([1, 32, 256], [3]))
def test_fused_recurrent_decode(benchmark, backend, batch):
    """One decode step for ``batch`` requests, states read from and written to a pool."""
    gen = kbench.generator()
    q, k, v, g, beta = delta_rule_inputs(gen, batch, 1)
    pool = state_pool(gen, batch + 1, HV, DK, DV, scale=0.1)
    indices = pool_indices(gen, batch, batch + 1)
    kbench.run(benchmark, lambda: ops.fused_recurrent_gated_delta_rule(q, k, v, g, beta, initial_state=pool,
                                                                       ssm_state_indices=indices,
                                                                       use_qk_l2norm_in_kernel=True,
                                                                       backend=backend),
               batch=batch, heads_k=HK, heads_v=HV, head_dim=DK)


@pytest.mark.parametrize("backend", kbench.backends("fused_gdn_gating"))
@pytest.mark.parametrize("tokens", pick([256, 8192], [16]))
def test_fused_gdn_gating(benchmark, backend, tokens):
    gen = kbench.generator()
    call = gating_inputs(gen, tokens, HV, DTYPE, a_scale=3.0)
    kbench.run(benchmark, lambda: ops.fused_gdn_gating(**call, backend=backend),
               tokens=tokens, heads_v=HV)


@pytest.mark.parametrize("backend", kbench.backends("gdn_decode_step"))
@pytest.mark.parametrize("batch", pick([1, 32, 256], [3]))
def test_gdn_decode_step(benchmark, backend, batch):
    """One decode step of a GDN layer for ``batch`` requests: conv, gates, delta rule, norm; both pools in place."""
    call = decode_step_call(kbench.generator(), tokens=batch, hk=HK, hv=HV, dk=DK, dv=DV, width=QWEN.conv_width,
                            pool_rows=batch + 1, state_indices=torch.arange(batch, dtype=torch.int32))
    call = {k: v.to(DEVICE) if isinstance(v, torch.Tensor) else v for k, v in call.items()}
    kbench.run(benchmark, lambda: ops.gdn_decode_step(**call, backend=backend),
               batch=batch, heads_k=HK, heads_v=HV, head_dim=DK)
