"""Torch reference for attention over the paged KV cache (defines the semantics).

Contract. N requests, T new tokens, Hq query heads, Hkv KV heads with
Hq % Hkv == 0 (query head h reads KV head h // (Hq / Hkv)), D head dim, Bs
block size. ``key_cache``/``value_cache`` are paged BNSD [NB, Hkv, Bs, D]:
position p of request r is ``cache[block_tables[r, p // Bs], :, p % Bs]``;
int8 caches hold ``q`` with ``x = q * scale`` (``k_scale``/``v_scale``
float32 [Hkv, D]). Scores are ``scale * q . k`` and the softmax is computed in
float32; outputs are in the query's dtype.

* ``paged_decode_attention``: query [N, Hq, D]; request r's single query row
  attends to its ``seq_lens[r]`` cached tokens (the current token is already
  in the cache). ``seq_lens[r] == 0`` outputs zeros.
* ``prefill_attention``: query [T, Hq, D], key/value [T, Hkv, D]; request r's
  new tokens are rows ``cu_seqlens_q[r]:cu_seqlens_q[r+1]`` (possibly none).
  They attend to the first ``context_lens[r]`` cached tokens of r (none
  without ``context_lens``) and to r's new tokens taken from ``key``/``value``;
  with ``causal`` new token i sees the whole context and new tokens 0..i.
* ``mixed_attention``: the first ``num_decodes`` requests are decodes (one row
  each, all ``seq_lens[r]`` tokens from the cache); the rest are prefill chunks
  with ``seq_lens[r] - q_len`` cached context tokens. Defined here as exactly
  the decode reference on the decode rows followed by the prefill reference on
  the rest.

The functions take keyword arguments as ``qwen_ops.ops._backend`` calls them,
after the op layer has validated them (so lengths, block ids and dtypes are
trusted here) and resolved ``scale`` to a float. Requests are handled one by
one in a Python loop: this is the readable definition, not a fast path.
"""
from __future__ import annotations

import torch

from ..cache.reference import dequantize_int8


def _read_cache(cache: torch.Tensor, block_row: torch.Tensor, length: int,
                scale: torch.Tensor | None) -> torch.Tensor:
    """The first ``length`` tokens of one request: float32 [length, Hkv, D].

    ``cache``: [NB, Hkv, Bs, D]; ``block_row``: [M] block ids of the request;
    ``scale``: float32 [Hkv, D] for int8 caches, else None.
    """
    _, num_kv_heads, block_size, head_dim = cache.shape
    num_blocks = -(-length // block_size)
    blocks = cache[block_row[:num_blocks].long()]  # [n, Hkv, Bs, D]
    # Block-major then row-major is position order: p = i * Bs + row.
    tokens = blocks.transpose(1, 2).reshape(-1, num_kv_heads, head_dim)[:length]
    return dequantize_int8(tokens, scale) if cache.dtype == torch.int8 else tokens.to(torch.float32)


def _attend(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, scale: float,
            visible: torch.Tensor | None) -> torch.Tensor:
    """Softmax attention of one request in float32.

    ``query``: [L, Hq, D]; ``key``, ``value``: float32 [S, Hkv, D];
    ``visible``: bool [L, S] (None: everything visible). Returns float32
    [L, Hq, D]. With S == 0 the sums are empty and the result is zeros.
    """
    group = query.shape[1] // key.shape[1]
    # Query head h reads KV head h // group.
    key = key.repeat_interleave(group, dim=1)
    value = value.repeat_interleave(group, dim=1)
    scores = torch.einsum("lhd,shd->hls", query.to(torch.float32), key) * scale
    if visible is not None:
        scores = scores.masked_fill(~visible, float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    return torch.einsum("hls,shd->lhd", probs, value)


def paged_decode_attention(*, query, key_cache, value_cache, block_tables, seq_lens, scale,
                           k_scale=None, v_scale=None) -> torch.Tensor:
    """query [N, Hq, D] -> [N, Hq, D] in query's dtype; see the module docstring."""
    out = torch.zeros_like(query)
    for r, length in enumerate(seq_lens.tolist()):
        if length == 0:
            continue  # nothing to attend to: the row stays zero
        key = _read_cache(key_cache, block_tables[r], length, k_scale)
        value = _read_cache(value_cache, block_tables[r], length, v_scale)
        out[r] = _attend(query[r:r + 1], key, value, scale, None)[0]
    return out


def prefill_attention(*, query, key, value, cu_seqlens_q, key_cache=None, value_cache=None, block_tables=None,
                      context_lens=None, scale, k_scale=None, v_scale=None, causal=True) -> torch.Tensor:
    """query [T, Hq, D], key/value [T, Hkv, D] -> [T, Hq, D]; see the module docstring."""
    out = torch.zeros_like(query)
    starts = cu_seqlens_q.tolist()
    num_requests = len(starts) - 1
    contexts = context_lens.tolist() if context_lens is not None else [0] * num_requests
    for r in range(num_requests):
        start, end = starts[r], starts[r + 1]
        new, context = end - start, contexts[r]
        if new == 0:
            continue
        k = key[start:end].to(torch.float32)
        v = value[start:end].to(torch.float32)
        if context:
            k = torch.cat([_read_cache(key_cache, block_tables[r], context, k_scale), k])
            v = torch.cat([_read_cache(value_cache, block_tables[r], context, v_scale), v])
        visible = None
        if causal:
            # Column c is context for c < context, else new token c - context.
            columns = torch.arange(context + new, device=query.device)
            rows = torch.arange(new, device=query.device)
            visible = columns[None, :] <= context + rows[:, None]
        out[start:end] = _attend(query[start:end], k, v, scale, visible)
    return out


def mixed_attention(*, query, key, value, key_cache, value_cache, block_tables, query_start_loc, seq_lens,
                    num_decodes, scale, k_scale=None, v_scale=None) -> torch.Tensor:
    """Decode reference on the first ``num_decodes`` rows, prefill reference on the rest."""
    d = num_decodes  # decodes have one row each, so they are rows 0..d-1
    decode = paged_decode_attention(query=query[:d], key_cache=key_cache, value_cache=value_cache,
                                    block_tables=block_tables[:d], seq_lens=seq_lens[:d], scale=scale,
                                    k_scale=k_scale, v_scale=v_scale)
    prefill_starts = query_start_loc[d:] - query_start_loc[d]
    q_lens = prefill_starts[1:] - prefill_starts[:-1]
    prefill = prefill_attention(query=query[d:], key=key[d:], value=value[d:], cu_seqlens_q=prefill_starts,
                                key_cache=key_cache, value_cache=value_cache, block_tables=block_tables[d:],
                                context_lens=seq_lens[d:] - q_lens, scale=scale, k_scale=k_scale,
                                v_scale=v_scale, causal=True)
    return torch.cat([decode, prefill])
