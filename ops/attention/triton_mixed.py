"""Triton kernel for ``mixed_attention``: decodes and prefill chunks of one batch in one launch.

The host lists the batch's work units, decode units first as in the
contract: unit ``(r, 0)`` for each decode request r < ``num_decodes``, then
``(r, b)`` for each block of ``BLOCK_T`` new tokens of each prefill request.
Work item = (unit, KV head). The kernel branches on the unit's kind:

* decode (r < num_decodes): ``decode_item`` over all ``seq_lens[r]`` cached
  positions (the new token is already in the cache), a ``DECODE_M``-row tile;
* prefill: ``prefill_item`` over ``seq_lens[r] - q_len`` cached context
  tokens and the request's new tokens from ``key``/``value``, causally.

Both branches run the same inner loops as ``paged_decode_attention`` and
``prefill_attention`` (the helpers of ``triton_common``). Decode items are
not split across the sequence here: a split would need a second launch to
merge, and in a mixed batch the prefill items already fill the device.

Ascend UB bytes per buffer: the larger of the two branches, i.e. the prefill
one of ``triton_common`` with M = BLOCK_M rows.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from .._triton import configured, dot_precision, target
from .triton_common import (CUDA_CONFIGS, LOG2E, Geometry, decode_item, fixed_config, prefill_item, prefill_rows,
                            given_or_own_units, rows_view, scale_pointers, store_normalized)


@configured(fixed=fixed_config, cuda_configs=CUDA_CONFIGS, key=["BLOCK_M", "DECODE_M", "BLOCK_D", "INT8"])
@triton.jit
def _mixed_kernel(
    query, key, value, key_cache, value_cache, block_tables, query_start_loc, seq_lens, units, k_scale, v_scale,
    out, n_items, num_decodes, num_kv_heads, qk_scale, group, head_dim, block_size,
    stride_qt, stride_qh, stride_kt, stride_kh, stride_vt, stride_vh, stride_ot, stride_oh,
    stride_bt, stride_cb, stride_ch, stride_cr,
    DECODE_M: tl.constexpr, BLOCK_M: tl.constexpr, G_P2: tl.constexpr, BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr, INT8: tl.constexpr, DOT_PRECISION: tl.constexpr,
):
    for item in tl.range(tl.program_id(0), n_items, tl.num_programs(0)):
        kv_head = item % num_kv_heads
        unit = item // num_kv_heads
        request = tl.load(units + 2 * unit)
        q_start = tl.load(query_start_loc + request)
        seq_len = tl.load(seq_lens + request)
        if request < num_decodes:
            m_i, l_i, acc, head, row_ok = decode_item(
                query, key_cache, value_cache, block_tables, k_scale, v_scale, request, q_start, kv_head,
                0, seq_len, qk_scale, stride_qt, stride_qh, stride_bt, stride_cb, stride_ch, stride_cr, group,
                head_dim, block_size, DECODE_M, BLOCK_N, BLOCK_D, INT8, DOT_PRECISION)
            store_normalized(out, tl.cast(q_start, tl.int64) * stride_ot + head * stride_oh, row_ok, acc, l_i,
                             head_dim, BLOCK_D)
        else:
            q_len = tl.load(query_start_loc + request + 1) - q_start
            prefill_item(out, query, key, value, key_cache, value_cache, block_tables, k_scale, v_scale,
                         request, tl.load(units + 2 * unit + 1), kv_head, q_start, q_len, seq_len - q_len,
                         qk_scale, stride_qt, stride_qh, stride_kt, stride_kh, stride_vt, stride_vh, stride_ot,
                         stride_oh, stride_bt, stride_cb, stride_ch, stride_cr, group, head_dim, block_size,
                         BLOCK_M, G_P2, BLOCK_N, BLOCK_D, INT8, True, DOT_PRECISION)


def mixed_attention(*, query, key, value, key_cache, value_cache, block_tables, query_start_loc, seq_lens,
                    num_decodes, scale, k_scale=None, v_scale=None, prefill_units=None) -> torch.Tensor:
    """Triton implementation of ``qwen_ops.ops.mixed_attention`` (arguments validated by the op).

    query: [T, Hq, D]; key, value: [T, Hkv, D] (any strides, unit stride
    along D made if missing); caches [NB, Hkv, Bs, D]; block_tables [N, M]
    int32; query_start_loc [N+1] int32; seq_lens [N] int32. Returns a new
    contiguous [T, Hq, D] tensor: decode rows first, then the prefill rows.
    prefill_units: the step's ``prefill_units_for`` table (built here when None).
    """
    out = torch.empty_like(query, memory_format=torch.contiguous_format)
    _, hkv, bs, _ = key_cache.shape
    query, key, value, block_tables = rows_view(query), rows_view(key), rows_view(value), rows_view(block_tables)
    seq_lens, query_start_loc = seq_lens.contiguous(), query_start_loc.contiguous()
    geo = Geometry.of(query, hkv)
    device = query.device
    k_scale, v_scale, int8 = scale_pointers(key_cache, k_scale, v_scale, seq_lens)
    rows = prefill_rows(target(device), geo.decode_m, geo.block_d, geo.elem_bytes, int8)
    # Built on the device (no copy per layer): decode request r is unit (r, 0).
    decode_units = torch.stack([torch.arange(num_decodes, dtype=torch.int32, device=device),
                                torch.zeros(num_decodes, dtype=torch.int32, device=device)], dim=1)
    units = torch.cat([decode_units, given_or_own_units("mixed_attention", prefill_units, query_start_loc,
                                                        num_decodes, rows // geo.g_p2)])
    n_items = units.shape[0] * hkv
    if n_items == 0:  # no decodes and only empty prefills, so T = 0
        return out
    _mixed_kernel.launch(
        device, n_items,
        query, key, value, key_cache, value_cache, block_tables, query_start_loc, seq_lens, units, k_scale, v_scale,
        out, n_items, num_decodes, hkv, scale * LOG2E, geo.group, geo.head_dim, bs,
        query.stride(0), query.stride(1), key.stride(0), key.stride(1), value.stride(0), value.stride(1),
        out.stride(0), out.stride(1), block_tables.stride(0), *key_cache.stride()[:3],
        shape=dict(rows=rows, block_d=geo.block_d, elem_bytes=geo.elem_bytes, int8=int8, device_kind=target(device)),
        DECODE_M=geo.decode_m, BLOCK_M=rows, G_P2=geo.g_p2, BLOCK_D=geo.block_d, INT8=int8,
        DOT_PRECISION=dot_precision(target(device), query.dtype),
    )
    return out
