"""The calls of the cache and attention ops, built from a case's parameters.

Each builder returns the keyword arguments of one valid call (backend not
included), drawn from a :class:`~qwen_ops.testing.draw.Draw`, so a test
compares backends on them and a benchmark times them. A case is a row of
parameters (dtypes, heads, head dim, block size, per-request lengths); the
tables of named cases live with what runs them (a test's edge cases say
why each exists; a benchmark's are the sizes it times).
"""
from __future__ import annotations

import torch

from .draw import Draw
from .paged_kv import INT8, block_tables, int8_scales, offsets, paged_cache, random_cache, slot_mapping


def cache_write_call(draw: Draw, *, tokens, hkv, head_dim, block_size, num_blocks, dtype, cache_dtype,
                     cache_fill="random", padding=None, slot_dtype=torch.int32, key_scale=1.0,
                     scale_range=(0.005, 0.055)) -> dict:
    """Keyword arguments of ``reshape_and_cache``: ``tokens`` new K/V rows into distinct random slots.

    key/value normal times ``key_scale`` in ``dtype``; caches of
    ``cache_dtype`` pre-filled with garbage (``cache_fill="random"``, so
    slots left alone are checked to stay intact) or zeros; for int8 caches,
    per-channel scales uniform in ``scale_range``; ``padding`` tokens
    (an index of the slot mapping) are -1.
    """
    key = draw.randn(tokens, hkv, head_dim, dtype=dtype, scale=key_scale)
    value = draw.randn(tokens, hkv, head_dim, dtype=dtype, scale=key_scale)
    slots = slot_mapping(draw, num_blocks * block_size, tokens, padding=padding, dtype=slot_dtype)
    shape = (num_blocks, hkv, block_size, head_dim)
    if cache_fill == "random":
        key_cache, value_cache = random_cache(draw, shape, cache_dtype), random_cache(draw, shape, cache_dtype)
    elif cache_fill == "zeros":
        key_cache = torch.zeros(shape, dtype=cache_dtype, device=draw.device)
        value_cache = torch.zeros_like(key_cache)
    else:
        raise ValueError(f"cache_write_call: cache_fill must be 'random' or 'zeros', got {cache_fill!r}")
    k_scale = v_scale = None
    if cache_dtype == INT8:
        k_scale, v_scale = (int8_scales(draw, hkv, head_dim, *scale_range) for _ in range(2))
    return dict(key=key, value=value, key_cache=key_cache, value_cache=value_cache, slot_mapping=slots,
                k_scale=k_scale, v_scale=v_scale)


def decode_call(draw: Draw, dtype, cache_dtype, hq, hkv, d, bs, seq_lens, width=None, *, spare_blocks=0,
                int8="calibrated") -> dict:
    """Keyword arguments of ``paged_decode_attention``: one query per request over ``seq_lens`` cached tokens.

    Block tables and caches as :func:`block_tables` and :func:`paged_cache`
    build them (``width``, ``spare_blocks``, ``int8`` passed on).
    """
    tables, nb = block_tables(draw, seq_lens, bs, width=width, spare_blocks=spare_blocks)
    caches = paged_cache(draw, nb, hkv, bs, d, cache_dtype, int8=int8)
    query = draw.randn(len(seq_lens), hq, d, dtype=dtype)
    return dict(query=query, key_cache=caches["key_cache"], value_cache=caches["value_cache"], block_tables=tables,
                seq_lens=draw.tensor(list(seq_lens), torch.int32), k_scale=caches["k_scale"],
                v_scale=caches["v_scale"])


def _new_tokens(draw, tokens, hq, hkv, d, dtype):
    return dict(query=draw.randn(tokens, hq, d, dtype=dtype), key=draw.randn(tokens, hkv, d, dtype=dtype),
                value=draw.randn(tokens, hkv, d, dtype=dtype))


def prefill_call(draw: Draw, dtype, cache_dtype, hq, hkv, d, bs, q_lens, context_lens=None, *, spare_blocks=0,
                 int8="calibrated") -> dict:
    """Keyword arguments of ``prefill_attention``: ``q_lens`` new tokens per request (TND, packed).

    With ``context_lens`` the requests also attend to that many cached
    tokens in paged caches of ``cache_dtype``; without, there is no cache.
    """
    call = dict(_new_tokens(draw, sum(q_lens), hq, hkv, d, dtype), cu_seqlens_q=offsets(q_lens, draw.device))
    if context_lens is not None:
        tables, nb = block_tables(draw, context_lens, bs, spare_blocks=spare_blocks)
        call.update(paged_cache(draw, nb, hkv, bs, d, cache_dtype, int8=int8), block_tables=tables,
                    context_lens=draw.tensor(list(context_lens), torch.int32))
    return call


def mixed_call(draw: Draw, dtype, cache_dtype, hq, hkv, d, bs, q_lens, seq_lens, num_decodes, *, spare_blocks=0,
               int8="calibrated") -> dict:
    """Keyword arguments of ``mixed_attention``: ``num_decodes`` decode rows first, then prefill chunks.

    Decodes read all ``seq_lens[r]`` tokens from the cache (their new token
    included); prefills read ``seq_lens[r] - q_lens[r]`` and take the chunk
    from key/value.
    """
    cached = [s if r < num_decodes else s - q for r, (q, s) in enumerate(zip(q_lens, seq_lens))]
    tables, nb = block_tables(draw, cached, bs, spare_blocks=spare_blocks)
    caches = paged_cache(draw, nb, hkv, bs, d, cache_dtype, int8=int8)
    return dict(_new_tokens(draw, sum(q_lens), hq, hkv, d, dtype), **caches, block_tables=tables,
                query_start_loc=offsets(q_lens, draw.device), seq_lens=draw.tensor(list(seq_lens), torch.int32),
                num_decodes=num_decodes)
