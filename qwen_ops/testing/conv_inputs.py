"""Causal conv1d inputs (the GDN layers' short convolution): x, weight, bias, state pools, metadata.

Layouts are the ops' (``qwen_ops.ops.causal_conv1d_fn`` / ``causal_conv1d_update``):
x ``[T, C]`` packed (fn) or ``[B, C]`` (update), weight ``[C, K]``, bias ``[C]``,
states ``[rows, K - 1, C]``, cache indices ``[N]`` with -1 for padding.
"""
from __future__ import annotations

import torch

from .draw import Draw
from .paged_kv import offsets


def _indices(draw, values, dtype):
    if isinstance(values, torch.Tensor):
        return values.to(device=draw.device, dtype=dtype)
    return draw.tensor(values, dtype)


def _weights(draw, channels, width, dtype, bias, weight_scale):
    weight = draw.randn(channels, width, dtype=dtype, scale=weight_scale)
    return weight, (draw.randn(channels, dtype=dtype) if bias else None)


def conv_fn_call(draw: Draw, lengths, channels, width, dtype, *, pool_rows, cache_indices, has_initial_state,
                 pool_dtype=None, bias=True, weight_scale=1.0, index_dtype=torch.int32) -> dict:
    """Keyword arguments of ``causal_conv1d_fn`` over packed sequences of ``lengths`` tokens.

    x normal [sum(lengths), C]; a state pool of ``pool_rows`` rows in
    ``pool_dtype`` (default ``dtype``); ``cache_indices`` and
    ``has_initial_state`` as given (lists or tensors).
    """
    x = draw.randn(sum(lengths), channels, dtype=dtype)
    weight, b = _weights(draw, channels, width, dtype, bias, weight_scale)
    states = draw.randn(pool_rows, width - 1, channels, dtype=pool_dtype or dtype)
    return dict(x=x, weight=weight, bias=b, conv_states=states, query_start_loc=offsets(lengths, draw.device),
                cache_indices=_indices(draw, cache_indices, index_dtype),
                has_initial_state=_indices(draw, has_initial_state, torch.bool))


def conv_update_call(draw: Draw, channels, width, dtype, *, pool_rows, cache_indices, pool_dtype=None, bias=True,
                     weight_scale=1.0, index_dtype=torch.int32) -> dict:
    """Keyword arguments of ``causal_conv1d_update``: one token for each of len(cache_indices) sequences."""
    idx = _indices(draw, cache_indices, index_dtype)
    x = draw.randn(idx.shape[0], channels, dtype=dtype)
    weight, b = _weights(draw, channels, width, dtype, bias, weight_scale)
    states = draw.randn(pool_rows, width - 1, channels, dtype=pool_dtype or dtype)
    return dict(x=x, conv_states=states, weight=weight, bias=b, cache_indices=idx)
