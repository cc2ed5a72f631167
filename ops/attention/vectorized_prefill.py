"""Prefill attention in query tiles with batched matmuls over KV heads: what the torch backend runs on the CPU.

Same contract and semantics as ``reference.prefill_attention`` (kept as the
readable definition); tested against it (``tests/ops/test_vectorized_attention.py``)
and, through the public op, against float64 loops. The reference builds, per
request, the whole [Hq, L, S] score matrix over every key (2 GiB for one
8192-token prompt with 8 query heads), masks half of it away and repeats each
KV head for its query heads. This form, per request:

* takes the request's keys and values once, KV head major [Hkv, S, D]
  (cached context gathered block by block with ``gather_heads``, INT8 context
  dequantized, then the new tokens);
* walks its new tokens in tiles of ``QUERY_TILE`` rows: one bmm of the tile's
  [G * rows, D] queries of each KV head (the G query heads of a KV head share
  its keys, nothing repeated) against only the keys the tile can see (causal:
  up to its last row), the causal mask applied only to the tile's last
  ``rows`` columns, the softmax's exponentials taken in place in a reused
  score buffer, and one bmm with the values, normalised after the product
  (dividing [rows, D] instead of [rows, S]).

So the products cost the causal half of the FLOPs (plus half a tile per row)
and the score buffer stays small. Float32 sums in a different order from the
reference's: the two agree to rounding, not bit for bit.
"""
from __future__ import annotations

import torch

from ..cache.reference import dequantize_int8
from .vectorized_decode import gather_heads

F32 = torch.float32
I64 = torch.int64
QUERY_TILE = 64  # query rows per tile: scores of 8 heads x 64 rows x 8192 keys = 16 MiB


def request_keys_values(key, value, start, end, key_cache, value_cache, block_row, context, k_scale, v_scale):
    """float32 [Hkv, context + new, D] keys and values of one request: ``context`` cached tokens, then its new ones."""
    new_k, new_v = (x[start:end].to(F32).transpose(0, 1) for x in (key, value))  # [Hkv, new, D] views
    if not context:
        return new_k.contiguous(), new_v.contiguous()
    block_size = key_cache.shape[2]
    ids = block_row[: -(-context // block_size)].to(I64)
    out = []
    for cache, scale, new in ((key_cache, k_scale, new_k), (value_cache, v_scale, new_v)):
        cached = gather_heads(cache, ids)  # [Hkv, nb, Bs, D]
        cached = cached.reshape(cached.shape[0], -1, cached.shape[3])[:, :context]
        cached = dequantize_int8(cached, scale[:, None, :]) if cache.dtype == torch.int8 else cached.to(F32)
        out.append(torch.cat([cached, new], dim=1))
    return out[0], out[1]


def attend_tiles(query, keys, values, scale, context, causal, out):
    """Write ``out`` [L, Hq, D] = attention of ``query`` [L, Hq, D] over keys/values [Hkv, S, D] float32.

    New row i sees every key when not ``causal``, else keys 0 .. context + i.
    """
    length, hq, d = query.shape
    hkv, total, _ = keys.shape
    group = hq // hkv
    tile = min(QUERY_TILE, length)
    scores_buffer = torch.empty(hkv * group * tile * total, dtype=F32, device=query.device)
    upper = torch.ones(tile, tile, dtype=torch.bool, device=query.device).triu_(1)  # key after the query row
    for first in range(0, length, tile):
        last = min(first + tile, length)
        rows = last - first
        seen = context + last if causal else total
        # [rows, Hq, D] -> [Hkv, G * rows, D]: the G query heads of a KV head as the rows of one product.
        q = (query[first:last].to(F32) * scale).view(rows, hkv, group, d).permute(1, 2, 0, 3).reshape(
            hkv, group * rows, d)
        scores = torch.bmm(q, keys[:, :seen].transpose(1, 2),
                           out=scores_buffer[: hkv * group * rows * seen].view(hkv, group * rows, seen))
        if causal:  # only the tile's own new keys can lie after a row
            diagonal = scores.view(hkv, group, rows, seen)[..., seen - rows:]
            diagonal.masked_fill_(upper[:rows, :rows], float("-inf"))
        peak = scores.amax(dim=-1, keepdim=True)
        scores.sub_(peak).exp_()
        total_weight = scores.sum(dim=-1, keepdim=True)
        mixed = torch.bmm(scores, values[:, :seen]).div_(total_weight)  # [Hkv, G * rows, D]
        out[first:last] = mixed.view(hkv, group, rows, d).permute(2, 0, 1, 3).reshape(rows, hq, d).to(out.dtype)


def prefill_attention(*, query, key, value, cu_seqlens_q, key_cache=None, value_cache=None, block_tables=None,
                      context_lens=None, scale, k_scale=None, v_scale=None, causal=True) -> torch.Tensor:
    """query [T, Hq, D], key/value [T, Hkv, D] -> [T, Hq, D]; see ``reference.py`` for the contract."""
    out = torch.zeros_like(query)
    starts = cu_seqlens_q.tolist()
    contexts = context_lens.tolist() if context_lens is not None else [0] * (len(starts) - 1)
    for r, context in enumerate(contexts):  # one iteration per request, each a few large products
        start, end = starts[r], starts[r + 1]
        if end == start:
            continue
        keys, values = request_keys_values(key, value, start, end, key_cache, value_cache,
                                           block_tables[r] if context else None, context, k_scale, v_scale)
        attend_tiles(query[start:end], keys, values, scale, context, causal, out[start:end])
    return out
