"""Public attention ops: argument checks, backend dispatch, torch.library entries.

Notation: N requests, T new tokens, Hq query heads, Hkv KV heads (Hq % Hkv == 0,
query head h reads KV head h // (Hq / Hkv)), D head dim, Bs block size, NB
blocks. Caches are paged BNSD [NB, Hkv, Bs, D]; see ``qwen_ops.ops.cache``.
"""
from __future__ import annotations

from typing import Optional

import torch

from .. import _validate as check
from .._backend import dispatch, resolved_backend
from .._library import custom_op, resolved_scale

I32 = (torch.int32,)


def _check_query_and_cache(op, query, key_cache, value_cache, k_scale, v_scale, *, values):
    """Checks shared by every attention op; returns (NB, Hkv, Bs, D)."""
    check.tensor(op, "query", query, dtypes=check.FLOAT_DTYPES, ndim=3, layout="[T or N, Hq, D]")
    check.nonempty_dim(op, "query", query, 2, "head dim D")
    nb, hkv, bs, d = check.kv_cache_pair(op, key_cache, value_cache)
    check.head_dims(op, **{"query head dim": query.shape[2], "key_cache head dim": d})
    check.gqa(op, query.shape[1], hkv)
    if key_cache.dtype != torch.int8:
        check.same_dtype(op, query=query, key_cache=key_cache)
    check.kv_scales(op, key_cache.dtype, k_scale, v_scale, hkv, d, values=values)
    return nb, hkv, bs, d


def _check_new_kv(op, query, key, value, hkv):
    t, _, d = query.shape
    check.tensor(op, "key", key, dtypes=check.FLOAT_DTYPES, ndim=3, layout="[T, Hkv, D]")
    check.tensor(op, "key", key, shape=(t, None, d), layout=f"[T, Hkv, D] with T = {t}, D = {d}")
    if hkv is None:
        hkv = key.shape[1]
    check.tensor(op, "key", key, shape=(t, hkv, d), layout=f"[T, Hkv, D] = [{t}, {hkv}, {d}]")
    check.tensor(op, "value", value, dtypes=check.FLOAT_DTYPES, shape=(t, hkv, d),
                 layout=f"[T, Hkv, D] = [{t}, {hkv}, {d}]")
    check.same_dtype(op, query=query, key=key, value=value)
    check.gqa(op, query.shape[1], hkv, kv_name="key")


def _check_units(op, query, prefill_units):
    """Work units an engine built once per step (``prefill_units_for``): shape, dtype and device here."""
    if prefill_units is not None:
        check.tensor(op, "prefill_units", prefill_units, dtypes=I32, shape=(None, 2), layout="[U, 2] int32")
        check.same_device(op, query=query, prefill_units=prefill_units)


def prefill_units_for(query_start_loc: torch.Tensor, first: int, *, device, dtype: torch.dtype, num_q_heads: int,
                      num_kv_heads: int, head_dim: int, kv_cache_dtype: torch.dtype | None = None,
                      op: str = "mixed_attention", backend: str | None = None) -> torch.Tensor | None:
    """The ``prefill_units`` argument of ``op`` for one step, built on the host; None when its backend needs none.

    Args:
        query_start_loc: [N+1] offsets of the step on the CPU (for
            ``prefill_attention``: its ``cu_seqlens_q``).
        first: the first prefill request (``num_decodes`` for ``mixed_attention``, 0 for
            ``prefill_attention``).
        device, dtype, num_q_heads, num_kv_heads, head_dim, kv_cache_dtype: what
            ``op`` will be called with (query on ``device`` [T, Hq, D] of ``dtype``,
            caches of ``kv_cache_dtype``, default ``dtype``).
        op, backend: the op and the backend it will run on (None: the device decides).
    Returns:
        [U, 2] int32 (request, query block) on the CPU, one unit per block of
        new tokens of the Triton kernels for these shapes; the same for every
        layer of a model, so build it once per step and move it to ``device``.
    """
    device = torch.device(device)
    if resolved_backend(op, backend, device) != "triton":
        return None
    from .triton_common import prefill_block_tokens, prefill_units

    int8 = (kv_cache_dtype or dtype) == torch.int8
    block_t = prefill_block_tokens(device, dtype, num_q_heads, num_kv_heads, head_dim, int8)
    return prefill_units(query_start_loc.cpu(), first, block_t)


# ----------------------------------------------------------------------------- decode

DECODE = "paged_decode_attention"


def _check_decode(query, key_cache, value_cache, block_tables, seq_lens, k_scale, v_scale, *, values):
    nb, hkv, bs, d = _check_query_and_cache(DECODE, query, key_cache, value_cache, k_scale, v_scale, values=values)
    n = query.shape[0]
    check.tensor(DECODE, "block_tables", block_tables, dtypes=I32, ndim=2, layout="[N, M] int32")
    check.tensor(DECODE, "block_tables", block_tables, shape=(n, None), layout=f"[N, M] with N = {n}")
    check.tensor(DECODE, "seq_lens", seq_lens, dtypes=I32, shape=(n,), layout=f"[N] = [{n}] int32")
    check.same_device(DECODE, query=query, key_cache=key_cache, value_cache=value_cache,
                      block_tables=block_tables, seq_lens=seq_lens, k_scale=k_scale, v_scale=v_scale)
    check.lengths(DECODE, "seq_lens", seq_lens, values=values)
    check.block_table(DECODE, block_tables, seq_lens, nb, bs, values=values)


@custom_op(DECODE)
def _decode_op(query: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor,
               block_tables: torch.Tensor, seq_lens: torch.Tensor, scale: Optional[float],
               k_scale: Optional[torch.Tensor], v_scale: Optional[torch.Tensor],
               backend: Optional[str]) -> torch.Tensor:
    _check_decode(query, key_cache, value_cache, block_tables, seq_lens, k_scale, v_scale,
                  values=check.values_checked(query.device))
    return dispatch(DECODE, backend, query.device, query=query, key_cache=key_cache, value_cache=value_cache,
                    block_tables=block_tables, seq_lens=seq_lens,
                    scale=resolved_scale(DECODE, scale, query.shape[-1]), k_scale=k_scale, v_scale=v_scale)


@_decode_op.register_fake
def _decode_fake(query, key_cache, value_cache, block_tables, seq_lens, scale, k_scale, v_scale, backend):
    _check_decode(query, key_cache, value_cache, block_tables, seq_lens, k_scale, v_scale, values=False)
    return torch.empty_like(query)


def paged_decode_attention(query, key_cache, value_cache, block_tables, seq_lens, *, scale=None,
                           k_scale=None, v_scale=None, backend: str | None = None) -> torch.Tensor:
    """Decode attention: one query token per request over its paged cache.

    Args:
        query: [N, Hq, D] float16/bfloat16/float32.
        key_cache, value_cache: [NB, Hkv, Bs, D], the query's dtype or int8.
        block_tables: [N, M] int32; request r's position p is in block
            ``block_tables[r, p // Bs]``, row ``p % Bs``.
        seq_lens: [N] int32, tokens of request r in the cache (the current
            token already written). A row with 0 tokens outputs zeros.
        scale: softmax scale, default ``D ** -0.5``.
        k_scale, v_scale: float32 [Hkv, D], only (and always) with int8 caches.
    Returns:
        [N, Hq, D] in the query's dtype; the softmax is computed in float32.
    """
    return torch.ops.qwen_ops.paged_decode_attention(query, key_cache, value_cache, block_tables, seq_lens,
                                                     scale, k_scale, v_scale, backend)


# ----------------------------------------------------------------------------- prefill

PREFILL = "prefill_attention"


def _check_prefill(query, key, value, cu_seqlens_q, key_cache, value_cache, block_tables, context_lens,
                   k_scale, v_scale, prefill_units=None, *, values):
    op = PREFILL
    _check_units(op, query, prefill_units)
    check.tensor(op, "query", query, dtypes=check.FLOAT_DTYPES, ndim=3, layout="[T, Hq, D]")
    check.nonempty_dim(op, "query", query, 2, "head dim D")
    t = query.shape[0]
    check.tensor(op, "cu_seqlens_q", cu_seqlens_q, dtypes=I32, ndim=1, layout="[N+1] int32")
    n = cu_seqlens_q.shape[0] - 1
    check.cumulative(op, "cu_seqlens_q", cu_seqlens_q, t, values=values)
    if context_lens is None:
        for name, v in (("key_cache", key_cache), ("value_cache", value_cache), ("block_tables", block_tables),
                        ("k_scale", k_scale), ("v_scale", v_scale)):
            if v is not None:
                raise ValueError(f"{op}: argument '{name}' was given without 'context_lens'; "
                                 "pass context_lens [N] int32 to read context from the cache")
        _check_new_kv(op, query, key, value, None)
        check.same_device(op, query=query, key=key, value=value, cu_seqlens_q=cu_seqlens_q)
        return
    for name, v in (("key_cache", key_cache), ("value_cache", value_cache), ("block_tables", block_tables)):
        if v is None:
            raise ValueError(f"{op}: 'context_lens' was given, so argument '{name}' is required")
    nb, hkv, bs, d = _check_query_and_cache(op, query, key_cache, value_cache, k_scale, v_scale, values=values)
    _check_new_kv(op, query, key, value, hkv)
    check.tensor(op, "context_lens", context_lens, dtypes=I32, shape=(n,), layout=f"[N] = [{n}] int32")
    check.tensor(op, "block_tables", block_tables, dtypes=I32, ndim=2, layout="[N, M] int32")
    check.tensor(op, "block_tables", block_tables, shape=(n, None), layout=f"[N, M] with N = {n}")
    check.same_device(op, query=query, key=key, value=value, cu_seqlens_q=cu_seqlens_q, key_cache=key_cache,
                      value_cache=value_cache, block_tables=block_tables, context_lens=context_lens,
                      k_scale=k_scale, v_scale=v_scale)
    check.lengths(op, "context_lens", context_lens, values=values)
    check.block_table(op, block_tables, context_lens, nb, bs, values=values, lens_name="context_lens")


@custom_op(PREFILL)
def _prefill_op(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, cu_seqlens_q: torch.Tensor,
                key_cache: Optional[torch.Tensor], value_cache: Optional[torch.Tensor],
                block_tables: Optional[torch.Tensor], context_lens: Optional[torch.Tensor],
                scale: Optional[float], k_scale: Optional[torch.Tensor], v_scale: Optional[torch.Tensor],
                causal: bool, backend: Optional[str], prefill_units: Optional[torch.Tensor] = None) -> torch.Tensor:
    _check_prefill(query, key, value, cu_seqlens_q, key_cache, value_cache, block_tables, context_lens,
                   k_scale, v_scale, prefill_units, values=check.values_checked(query.device))
    return dispatch(PREFILL, backend, query.device, query=query, key=key, value=value, cu_seqlens_q=cu_seqlens_q,
                    key_cache=key_cache, value_cache=value_cache, block_tables=block_tables,
                    context_lens=context_lens, scale=resolved_scale(PREFILL, scale, query.shape[-1]),
                    k_scale=k_scale, v_scale=v_scale, causal=causal, derived=dict(prefill_units=prefill_units))


@_prefill_op.register_fake
def _prefill_fake(query, key, value, cu_seqlens_q, key_cache, value_cache, block_tables, context_lens, scale,
                  k_scale, v_scale, causal, backend, prefill_units=None):
    _check_prefill(query, key, value, cu_seqlens_q, key_cache, value_cache, block_tables, context_lens,
                   k_scale, v_scale, prefill_units, values=False)
    return torch.empty_like(query)


def prefill_attention(query, key, value, cu_seqlens_q, *, key_cache=None, value_cache=None, block_tables=None,
                      context_lens=None, scale=None, k_scale=None, v_scale=None, causal=True,
                      backend: str | None = None, prefill_units=None) -> torch.Tensor:
    """Variable-length (TND) prefill attention, optionally over cached context.

    Args:
        query: [T, Hq, D]; key, value: [T, Hkv, D], same float dtype.
        cu_seqlens_q: [N+1] int32 offsets from 0 to T; request r's new tokens
            are rows ``cu_seqlens_q[r]:cu_seqlens_q[r+1]`` (may be empty).
        key_cache, value_cache, block_tables ([N, M] int32), context_lens
            ([N] int32): with ``context_lens``, request r also attends to its
            first ``context_lens[r]`` cached tokens (dequantized when int8).
            Without it there is no context and no cache may be given.
        scale: default ``D ** -0.5``. k_scale, v_scale: as for int8 caches.
        causal: new token i sees the whole context and new tokens 0..i of its
            request (all new tokens when False).
        prefill_units: ``prefill_units_for(cu_seqlens_q, 0, op="prefill_attention", ...)``
            on the query's device, built once per step by an engine; built here when None.
    Returns:
        [T, Hq, D] in the query's dtype (softmax in float32).
    """
    return torch.ops.qwen_ops.prefill_attention(query, key, value, cu_seqlens_q, key_cache, value_cache,
                                                block_tables, context_lens, scale, k_scale, v_scale, causal,
                                                backend, prefill_units)


# ----------------------------------------------------------------------------- mixed

MIXED = "mixed_attention"


def _check_mixed(query, key, value, key_cache, value_cache, block_tables, query_start_loc, seq_lens,
                 num_decodes, k_scale, v_scale, prefill_units=None, *, values):
    op = MIXED
    _check_units(op, query, prefill_units)
    nb, hkv, bs, d = _check_query_and_cache(op, query, key_cache, value_cache, k_scale, v_scale, values=values)
    _check_new_kv(op, query, key, value, hkv)
    t = query.shape[0]
    check.tensor(op, "query_start_loc", query_start_loc, dtypes=I32, ndim=1, layout="[N+1] int32")
    n = query_start_loc.shape[0] - 1
    check.tensor(op, "seq_lens", seq_lens, dtypes=I32, shape=(n,), layout=f"[N] = [{n}] int32")
    check.tensor(op, "block_tables", block_tables, dtypes=I32, ndim=2, layout="[N, M] int32")
    check.tensor(op, "block_tables", block_tables, shape=(n, None), layout=f"[N, M] with N = {n}")
    if not isinstance(num_decodes, int) or not 0 <= num_decodes <= n:
        raise ValueError(f"{op}: argument 'num_decodes' must be an int in [0, N = {n}], got {num_decodes!r}")
    check.same_device(op, query=query, key=key, value=value, key_cache=key_cache, value_cache=value_cache,
                      block_tables=block_tables, query_start_loc=query_start_loc, seq_lens=seq_lens,
                      k_scale=k_scale, v_scale=v_scale)
    check.cumulative(op, "query_start_loc", query_start_loc, t, values=values)
    if not values:
        return
    q_lens = query_start_loc[1:] - query_start_loc[:-1]
    if num_decodes and bool((q_lens[:num_decodes] != 1).any()):
        raise ValueError(f"{op}: the first num_decodes = {num_decodes} requests are decodes and must have "
                         "exactly one query row each in 'query_start_loc'")
    check.lengths(op, "seq_lens", seq_lens)
    context = seq_lens - q_lens
    context[:num_decodes] = seq_lens[:num_decodes]
    if bool((context[num_decodes:] < 0).any()):
        raise ValueError(f"{op}: argument 'seq_lens' must be >= the request's query length for prefill requests")
    check.block_table(op, block_tables, context, nb, bs)


@custom_op(MIXED)
def _mixed_op(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, key_cache: torch.Tensor,
              value_cache: torch.Tensor, block_tables: torch.Tensor, query_start_loc: torch.Tensor,
              seq_lens: torch.Tensor, num_decodes: int, scale: Optional[float], k_scale: Optional[torch.Tensor],
              v_scale: Optional[torch.Tensor], backend: Optional[str],
              prefill_units: Optional[torch.Tensor] = None) -> torch.Tensor:
    _check_mixed(query, key, value, key_cache, value_cache, block_tables, query_start_loc, seq_lens,
                 num_decodes, k_scale, v_scale, prefill_units, values=check.values_checked(query.device))
    return dispatch(MIXED, backend, query.device, query=query, key=key, value=value, key_cache=key_cache,
                    value_cache=value_cache, block_tables=block_tables, query_start_loc=query_start_loc,
                    seq_lens=seq_lens, num_decodes=num_decodes,
                    scale=resolved_scale(MIXED, scale, query.shape[-1]), k_scale=k_scale, v_scale=v_scale,
                    derived=dict(prefill_units=prefill_units))


@_mixed_op.register_fake
def _mixed_fake(query, key, value, key_cache, value_cache, block_tables, query_start_loc, seq_lens, num_decodes,
                scale, k_scale, v_scale, backend, prefill_units=None):
    _check_mixed(query, key, value, key_cache, value_cache, block_tables, query_start_loc, seq_lens,
                 num_decodes, k_scale, v_scale, prefill_units, values=False)
    return torch.empty_like(query)


def mixed_attention(query, key, value, key_cache, value_cache, block_tables, query_start_loc, seq_lens,
                    num_decodes, *, scale=None, k_scale=None, v_scale=None,
                    backend: str | None = None, prefill_units=None) -> torch.Tensor:
    """One call for a mixed batch: decode rows first, then prefill chunks.

    Args:
        query: [T, Hq, D]; key, value: [T, Hkv, D] (the step's new tokens).
        key_cache, value_cache: [NB, Hkv, Bs, D] paged caches (float or int8).
        block_tables: [N, M] int32. query_start_loc: [N+1] int32, 0..T.
        seq_lens: [N] int32, tokens of request r after this step.
        num_decodes: the first ``num_decodes`` requests are decodes: one row
            each, attending to all ``seq_lens[r]`` tokens read from the cache
            (the new token must already be written). The other requests are
            prefill chunks with ``seq_lens[r] - q_len`` cached context tokens,
            exactly as ``prefill_attention`` (new tokens from key/value).
        prefill_units: ``prefill_units_for(query_start_loc, num_decodes, ...)`` on
            the query's device, built once per step by an engine; built here when None.
    Returns:
        [T, Hq, D]: ``paged_decode_attention`` on the decode rows followed by
        ``prefill_attention`` on the rest. Either part may be empty.
    """
    return torch.ops.qwen_ops.mixed_attention(query, key, value, key_cache, value_cache, block_tables,
                                              query_start_loc, seq_lens, num_decodes, scale, k_scale, v_scale,
                                              backend, prefill_units)
