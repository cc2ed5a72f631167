"""Mixed decode + prefill attention from the two batched CPU forms: what the torch backend runs on the CPU.

``reference.mixed_attention`` is defined as the decode reference on the first
``num_decodes`` rows followed by the prefill reference on the rest; this is the
same composition of the faster forms (``vectorized_decode``, ``vectorized_prefill``),
written into one output instead of concatenating two. Tested against the
reference (``tests/ops/test_vectorized_attention.py``).
"""
from __future__ import annotations

import torch

from .vectorized_decode import paged_decode_attention
from .vectorized_prefill import prefill_attention


def mixed_attention(*, query, key, value, key_cache, value_cache, block_tables, query_start_loc, seq_lens,
                    num_decodes, scale, k_scale=None, v_scale=None) -> torch.Tensor:
    """Decode form on the first ``num_decodes`` rows, prefill form on the rest; see ``reference.py``."""
    d = num_decodes  # decodes have one row each, so they are rows 0..d-1
    decoded = paged_decode_attention(query=query[:d], key_cache=key_cache, value_cache=value_cache,
                                     block_tables=block_tables[:d], seq_lens=seq_lens[:d], scale=scale,
                                     k_scale=k_scale, v_scale=v_scale)
    if d == query.shape[0]:  # a step of decodes only: the decode form's output is the whole result
        return decoded
    out = torch.empty_like(query)
    out[:d] = decoded
    prefill_starts = query_start_loc[d:] - query_start_loc[d]
    q_lens = prefill_starts[1:] - prefill_starts[:-1]
    out[d:] = prefill_attention(query=query[d:], key=key[d:], value=value[d:], cu_seqlens_q=prefill_starts,
                                key_cache=key_cache, value_cache=value_cache, block_tables=block_tables[d:],
                                context_lens=seq_lens[d:] - q_lens, scale=scale, k_scale=k_scale,
                                v_scale=v_scale, causal=True)
    return out
