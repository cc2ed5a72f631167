"""Benchmarks of the causal conv1d ops of the GDN layers.

Qwen3.5 GDN: the convolution runs over the concatenated q, k, v projections,
C = 2 * 16 * 128 + 32 * 128 = 8192 channels, kernel width 4. Prefill chunks
of 512 to 8192 tokens (``causal_conv1d_fn``); decode batches of 1 to 256
(``causal_conv1d_update``). ``QWEN_OPS_BENCH_QUICK=1`` shrinks all of it.
"""
from __future__ import annotations

import pytest
import torch

import kbench
from kbench import DEVICE, pick
from qwen_ops import ops

CHANNELS = pick(2 * 16 * 128 + 32 * 128, 64)
WIDTH = 4


def conv_params(gen):
    return kbench.randn(CHANNELS, WIDTH, gen=gen, scale=0.5), kbench.randn(CHANNELS, gen=gen)


@pytest.mark.parametrize("backend", kbench.backends("causal_conv1d_fn"))
@pytest.mark.parametrize("sequences", pick([1, 4], [2]))
@pytest.mark.parametrize("tokens", pick([512, 8192], [40]))
def test_causal_conv1d_fn(benchmark, backend, sequences, tokens):
    gen = kbench.generator()
    weight, bias = conv_params(gen)
    x = kbench.randn(tokens, CHANNELS, gen=gen)
    lengths = [tokens // sequences] * (sequences - 1)
    lengths.append(tokens - sum(lengths))
    states = kbench.randn(sequences, WIDTH - 1, CHANNELS, gen=gen)
    indices = torch.arange(sequences, dtype=torch.int32, device=DEVICE)
    has_initial = torch.ones(sequences, dtype=torch.bool, device=DEVICE)
    qsl = kbench.offsets(lengths)
    kbench.run(benchmark, lambda: ops.causal_conv1d_fn(x, weight, bias, conv_states=states, query_start_loc=qsl,
                                                       cache_indices=indices, has_initial_state=has_initial,
                                                       backend=backend),
               tokens=tokens, sequences=sequences, channels=CHANNELS, width=WIDTH)


@pytest.mark.parametrize("backend", kbench.backends("causal_conv1d_update"))
@pytest.mark.parametrize("batch", pick([1, 32, 256], [3]))
def test_causal_conv1d_update(benchmark, backend, batch):
    gen = kbench.generator()
    weight, bias = conv_params(gen)
    x = kbench.randn(batch, CHANNELS, gen=gen)
    states = kbench.randn(batch + 1, WIDTH - 1, CHANNELS, gen=gen)
    indices = torch.randperm(batch + 1, generator=gen, device=DEVICE)[:batch].to(torch.int32)
    kbench.run(benchmark, lambda: ops.causal_conv1d_update(x, states, weight, bias, cache_indices=indices,
                                                           backend=backend),
               batch=batch, channels=CHANNELS, width=WIDTH)
