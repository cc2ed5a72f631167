"""Triton kernel for ``prefill_attention``: flash attention over TND with paged context.

Work item = (prefill unit u, KV head h), a unit being ``(request r, q_block
b)``: the ``BLOCK_T = BLOCK_M / G_P2`` new tokens ``b * BLOCK_T ...`` of r
(see ``triton_common``). The host lists the units from ``cu_seqlens_q``
(zero-length requests get none). Each item attends its rows, with an online
softmax in float32, first to the ``context_lens[r]`` cached tokens read block
by block from the paged cache (dequantized on the fly, never copied densely)
and then to r's new tokens taken from ``key``/``value``, causally: a row's
token sees every context token and new tokens up to itself, so the item stops
at its last token.

Ascend UB bytes per buffer: as in ``triton_common`` with M = BLOCK_M rows
(``prefill_rows`` shrinks BLOCK_M, ``fixed_config`` picks BLOCK_N, so that
two buffers fit 192 KiB).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from .._triton import configured, dot_precision, target
from .triton_common import (CUDA_CONFIGS, LOG2E, Geometry, fixed_config, prefill_item, prefill_rows,
                            given_or_own_units, rows_view, scale_pointers)


@configured(fixed=fixed_config, cuda_configs=CUDA_CONFIGS, key=["BLOCK_M", "G_P2", "BLOCK_D", "INT8", "CAUSAL"])
@triton.jit
def _prefill_kernel(
    query, key, value, key_cache, value_cache, block_tables, cu_seqlens_q, context_lens, units, k_scale, v_scale,
    out, n_items, num_kv_heads, qk_scale, group, head_dim, block_size,
    stride_qt, stride_qh, stride_kt, stride_kh, stride_vt, stride_vh, stride_ot, stride_oh,
    stride_bt, stride_cb, stride_ch, stride_cr,
    HAS_CONTEXT: tl.constexpr, BLOCK_M: tl.constexpr, G_P2: tl.constexpr, BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr, INT8: tl.constexpr, CAUSAL: tl.constexpr, DOT_PRECISION: tl.constexpr,
):
    for item in tl.range(tl.program_id(0), n_items, tl.num_programs(0)):
        kv_head = item % num_kv_heads
        unit = item // num_kv_heads
        request = tl.load(units + 2 * unit)
        q_block = tl.load(units + 2 * unit + 1)
        q_start = tl.load(cu_seqlens_q + request)
        q_len = tl.load(cu_seqlens_q + request + 1) - q_start
        if HAS_CONTEXT:
            context_len = tl.load(context_lens + request)
        else:
            context_len = 0
        prefill_item(out, query, key, value, key_cache, value_cache, block_tables, k_scale, v_scale,
                     request, q_block, kv_head, q_start, q_len, context_len, qk_scale,
                     stride_qt, stride_qh, stride_kt, stride_kh, stride_vt, stride_vh, stride_ot, stride_oh,
                     stride_bt, stride_cb, stride_ch, stride_cr, group, head_dim, block_size,
                     BLOCK_M, G_P2, BLOCK_N, BLOCK_D, INT8, CAUSAL, DOT_PRECISION)


def prefill_attention(*, query, key, value, cu_seqlens_q, key_cache=None, value_cache=None, block_tables=None,
                      context_lens=None, scale, k_scale=None, v_scale=None, causal=True,
                      prefill_units=None) -> torch.Tensor:
    """Triton implementation of ``qwen_ops.ops.prefill_attention`` (arguments validated by the op).

    query: [T, Hq, D]; key, value: [T, Hkv, D] (any strides, unit stride
    along D made if missing); cu_seqlens_q: [N+1] int32; optional paged
    context: caches [NB, Hkv, Bs, D], block_tables [N, M] int32,
    context_lens [N] int32. Returns a new contiguous [T, Hq, D] tensor.
    prefill_units: the ``prefill_units_for`` table of ``cu_seqlens_q`` (built here when None).
    """
    out = torch.empty_like(query, memory_format=torch.contiguous_format)
    hkv = key.shape[1]
    query, key, value = rows_view(query), rows_view(key), rows_view(value)
    geo = Geometry.of(query, hkv)
    device = query.device
    has_context = context_lens is not None
    if has_context:
        block_tables = rows_view(block_tables)
        context_lens = context_lens.contiguous()
        k_scale, v_scale, int8 = scale_pointers(key_cache, k_scale, v_scale, context_lens)
        cache_args = (key_cache, value_cache, block_tables, context_lens)
        cache_strides = (block_tables.stride(0), *key_cache.stride()[:3])
        block_size = key_cache.shape[2]
    else:  # no cache: the paged loop runs zero times; any tensors serve as pointers
        int8 = False
        k_scale = v_scale = cu_seqlens_q
        cache_args = (key, value, cu_seqlens_q, cu_seqlens_q)
        cache_strides = (0, 0, 0, 0)
        block_size = 1
    rows = prefill_rows(target(device), geo.decode_m, geo.block_d, geo.elem_bytes, int8)
    units = given_or_own_units("prefill_attention", prefill_units, cu_seqlens_q, 0, rows // geo.g_p2)
    n_items = units.shape[0] * hkv
    if n_items == 0:  # every request is empty, so T = 0
        return out
    key_cache, value_cache, block_tables, context_lens = cache_args
    _prefill_kernel.launch(
        device, n_items,
        query, key, value, key_cache, value_cache, block_tables, cu_seqlens_q.contiguous(), context_lens, units,
        k_scale, v_scale, out, n_items, hkv, scale * LOG2E, geo.group, geo.head_dim, block_size,
        query.stride(0), query.stride(1), key.stride(0), key.stride(1), value.stride(0), value.stride(1),
        out.stride(0), out.stride(1), *cache_strides,
        shape=dict(rows=rows, block_d=geo.block_d, elem_bytes=geo.elem_bytes, int8=int8, device_kind=target(device)),
        HAS_CONTEXT=has_context, BLOCK_M=rows, G_P2=geo.g_p2, BLOCK_D=geo.block_d, INT8=int8, CAUSAL=bool(causal),
        DOT_PRECISION=dot_precision(target(device), query.dtype),
    )
    return out
