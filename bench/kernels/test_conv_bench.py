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
from kbench import DTYPE, pick
from qwen_ops import ops
from qwen_ops.testing import SHAPES, conv_fn_call, conv_update_call, pool_indices

CHANNELS = pick(SHAPES["qwen3.5"].conv_channels, 64)
WIDTH = SHAPES["qwen3.5"].conv_width


@pytest.mark.parametrize("backend", kbench.backends("causal_conv1d_fn"))
@pytest.mark.parametrize("sequences", pick([1, 4], [2]))
@pytest.mark.parametrize("tokens", pick([512, 8192], [40]))
def test_causal_conv1d_fn(benchmark, backend, sequences, tokens):
    gen = kbench.generator()
    lengths = [tokens // sequences] * (sequences - 1)
    lengths.append(tokens - sum(lengths))
    call = conv_fn_call(gen, lengths, CHANNELS, WIDTH, DTYPE, pool_rows=sequences, weight_scale=0.5,
                        cache_indices=torch.arange(sequences), has_initial_state=[True] * sequences)
    kbench.run(benchmark, lambda: ops.causal_conv1d_fn(**call, backend=backend),
               tokens=tokens, sequences=sequences, channels=CHANNELS, width=WIDTH)


@pytest.mark.parametrize("backend", kbench.backends("causal_conv1d_update"))
@pytest.mark.parametrize("batch", pick([1, 32, 256], [3]))
def test_causal_conv1d_update(benchmark, backend, batch):
    gen = kbench.generator()
    call = conv_update_call(gen, CHANNELS, WIDTH, DTYPE, pool_rows=batch + 1, weight_scale=0.5,
                            cache_indices=pool_indices(gen, batch, batch + 1))
    kbench.run(benchmark, lambda: ops.causal_conv1d_update(**call, backend=backend),
               batch=batch, channels=CHANNELS, width=WIDTH)
