"""Paged decode attention batched over requests and KV heads: what the torch backend runs on the CPU.

(On CPU tensors with float32 or int8 caches and ``qwen_ops._C`` built,
``cpu_decode_kernel.decode_step`` serves the call first, reading the blocks in
place; the torch form below runs otherwise.)

Same contract and semantics as ``reference.paged_decode_attention`` (kept as
the readable definition, which loops over requests and repeats every KV head
for its query heads); tested against it (``tests/ops/test_vectorized_attention.py``)
and, through the public op, against float64 loops (``tests/ops/test_attention_reference.py``).
Differences, all for speed:

* No per-request work: the Python loop runs over tiles of requests (about
  ``TILE_BYTES`` of K and V each: 2 requests of 512 float32 tokens at
  Qwen3.5-0.8B's shapes), each gathered with one ``index_select`` per cache
  into a reused buffer, laid out
  [Hkv, n, S, D] (KV head major, so every (KV head, request) pair is one bmm
  batch entry, no copy to reorder it: ``gather_heads``). Blocks past a request's length are read
  from block 0 and masked out of the softmax (-inf), so unequal lengths need no
  per-row work.
* Grouped-query attention without repeating K/V: the G = Hq / Hkv query heads
  of a KV head are the G rows of one [G, D] x [D, S] product.
* INT8 caches are never dequantized as a whole: with ``x = q * scale`` per
  channel, ``q_row . (k * k_scale) = (q_row * k_scale) . k`` and
  ``sum_s p_s (v_s * v_scale) = v_scale * sum_s p_s v_s``, so the scales are
  applied to the [G, D] query and output rows; the gathered int8 tokens are
  only converted to float32 for the products.
* The tiles are small, so the gather, the two products and the softmax pass
  over data in cache, and no cache-sized tensor is allocated per call (their
  first-touch page faults); INT8 tiles are converted to float32 per tile.

Float32 sums in a different order from the reference's: the two agree to
rounding, not bit for bit.
"""
from __future__ import annotations

import torch

from .cpu_decode_kernel import decode_step

F32 = torch.float32
I64 = torch.int64
# Gathered float32 K + V per tile: small enough to stay in the last-level cache between the gather and the products.
TILE_BYTES = 4 << 20


def gathered_blocks(block_tables: torch.Tensor, lengths: torch.Tensor, block_size: int, num_blocks: int):
    """int64 [N, num_blocks] block ids with every column past a request's blocks pointing at block 0.

    ``lengths`` [N] int64 tokens per request. Such columns may hold -1 or a
    stale id; they are read from block 0 (always a valid block) and their
    positions are masked by the caller.
    """
    columns = torch.arange(num_blocks, device=block_tables.device)
    needed = columns[None, :] * block_size < lengths[:, None]
    return torch.where(needed, block_tables[:, :num_blocks].to(I64), 0)


def gather_heads(cache: torch.Tensor, ids: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """Blocks ``ids`` [m] (int64) of ``cache`` [NB, Hkv, Bs, D], KV head major: [Hkv, m, Bs, D] in the cache's dtype.

    Each (block, KV head) of the cache is a contiguous [Bs, D] slab, row
    ``block * Hkv + h`` of the cache viewed as [NB * Hkv, Bs, D]; one
    ``index_select`` of the rows ``h * m + j`` gathers them in this order (no
    reordering copy). ``out``: a contiguous buffer of at least Hkv * m * Bs * D
    elements whose front is used.
    """
    num_blocks, hkv, block_size, d = cache.shape
    head = torch.arange(hkv, device=cache.device)
    slabs = (head[:, None] + ids[None, :] * hkv).reshape(-1)
    if out is not None:
        out = out[: slabs.numel() * block_size * d].view(slabs.numel(), block_size, d)
    gathered = torch.index_select(cache.view(num_blocks * hkv, block_size, d), 0, slabs, out=out) \
        if out is not None else cache.view(num_blocks * hkv, block_size, d).index_select(0, slabs)
    return gathered.view(hkv, ids.numel(), block_size, d)


def attend_batched(query, keys, values, scale, lengths, k_scale=None, v_scale=None, out=None):
    """One query row per (KV head, request) pair against its gathered tokens, softmax in float32.

    ``query`` float [n, Hq, D]; ``keys``, ``values`` [Hkv, n, S, D] (a float
    dtype, or int8 with ``k_scale``/``v_scale`` float32 [Hkv, D]); ``lengths`` int64
    [n] valid tokens of each request (>= 1; positions >= length are masked).
    Writes and returns ``out`` float32 [n, Hq, D].
    """
    n, hq, d = query.shape
    hkv, _, s, _ = keys.shape
    group = hq // hkv
    q = query.to(F32).view(n, hkv, group, d).transpose(0, 1) * scale  # [Hkv, n, G, D]
    if k_scale is not None:
        q = q * k_scale[:, None, None, :]
    scores = torch.matmul(q, keys.to(F32).transpose(-1, -2))  # [Hkv, n, G, S]; .to: int8 and 16-bit caches
    positions = torch.arange(s, device=query.device)
    scores.masked_fill_((positions[None, :] >= lengths[:, None])[None, :, None, :], float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    mixed = torch.matmul(probs, values.to(F32))  # [Hkv, n, G, D]
    if v_scale is not None:
        mixed.mul_(v_scale[:, None, None, :])
    result = mixed.transpose(0, 1).reshape(n, hq, d)
    if out is None:
        return result
    out.copy_(result)
    return out


def paged_decode_attention(*, query, key_cache, value_cache, block_tables, seq_lens, scale,
                           k_scale=None, v_scale=None) -> torch.Tensor:
    """query [N, Hq, D] -> [N, Hq, D] in query's dtype; see ``reference.py`` for the contract."""
    done = decode_step(query=query, key_cache=key_cache, value_cache=value_cache, block_tables=block_tables,
                       seq_lens=seq_lens, scale=scale, k_scale=k_scale, v_scale=v_scale)
    if done is not None:  # the C++ kernel reading blocks in place (cpu_decode_kernel.py); the torch form below otherwise
        return done
    n, hq, d = query.shape
    _, hkv, block_size, _ = key_cache.shape
    out = torch.zeros_like(query)
    lengths = seq_lens.to(I64)
    attending = (lengths > 0).nonzero().squeeze(-1)
    if attending.numel() == 0:
        return out
    every_row = attending.numel() == n
    if not every_row:  # requests with nothing cached keep their zero rows
        query, lengths, block_tables = query[attending], lengths[attending], block_tables[attending]
    result = out if every_row and out.dtype == F32 else torch.empty(query.shape, dtype=F32, device=query.device)
    int8 = key_cache.dtype == torch.int8
    token_bytes = hkv * d * 4 * 2  # float32 K and V of one position
    m = lengths.shape[0]
    max_blocks = -(-int(lengths.max()) // block_size)
    tile = max(1, min(m, TILE_BYTES // (token_bytes * max_blocks * block_size)))
    # One buffer per cache, reused by every tile (a tile's gather is a view of its front).
    buffers = [torch.empty(hkv * tile * max_blocks * block_size * d, dtype=key_cache.dtype, device=query.device)
               for _ in range(2)]
    for first in range(0, m, tile):
        rows = slice(first, min(first + tile, m))
        tile_lengths = lengths[rows]
        num_blocks = -(-int(tile_lengths.max()) // block_size)
        ids = gathered_blocks(block_tables[rows], tile_lengths, block_size, num_blocks).reshape(-1)  # [t * nb]
        t = rows.stop - first
        keys, values = (gather_heads(cache, ids, out=buffer).view(hkv, t, num_blocks * block_size, d)
                        for cache, buffer in ((key_cache, buffers[0]), (value_cache, buffers[1])))
        attend_batched(query[rows], keys, values, scale, tile_lengths, k_scale if int8 else None,
                       v_scale if int8 else None, out=result[rows])
    if result is out:
        return out
    out[attending] = result.to(out.dtype)
    return out
