"""Triton kernels for ``paged_decode_attention``, with split-KV (flash-decoding).

Work item = (request r, KV head h, split s). Item (r, h, s) computes the G
query heads of KV head h (one tile, see ``triton_common``) over cached
positions ``[s * split_len, min((s + 1) * split_len, seq_lens[r]))`` with an
online softmax in float32.

Splitting. A batch of few long requests has too few (request, head) items to
fill the device, so each request's positions are split into ``num_splits``
ranges of ``split_len`` tokens. The host chooses both without reading
``seq_lens`` (no device sync): from the grid size, N * Hkv and the longest
sequence the block table can hold (M * Bs); a split past a request's end is
an empty item. With one split the kernel writes the output directly; with
more it writes each split's (m, l, unnormalised acc) in float32 and a second
small kernel merges them per (request, KV head) and normalises.

Ascend UB bytes per buffer: attention kernel as in ``triton_common`` with
M = DECODE_M rows; merge kernel ``G_P2 * BLOCK_D * 4 * 2 + 16 * G_P2`` (the
running and the loaded partial acc, the running and loaded m and l): 33,024
bytes for G_P2 = 16, D = 256.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from .._triton import configured, dot_precision, grid_size, target
from .triton_common import (CUDA_CONFIGS, LOG2E, Geometry, decode_item, fixed_config, rows_view,
                            scale_pointers, store_normalized)

# A split covers at least this many positions (per target), so that each item
# streams enough K/V to outweigh writing and merging its partial result.
MIN_SPLIT_TOKENS = {"interpreter": 16, "cuda": 256, "npu": 512}
MAX_SPLITS = 64


@configured(fixed=fixed_config, cuda_configs=CUDA_CONFIGS, key=["BLOCK_D", "DECODE_M", "INT8", "PARTIAL"])
@triton.jit
def _decode_kernel(
    query, key_cache, value_cache, block_tables, seq_lens, k_scale, v_scale, out, part_m, part_l, part_acc,
    n_items, num_kv_heads, num_splits, split_len, qk_scale, group, head_dim, block_size,
    stride_qt, stride_qh, stride_ot, stride_oh, stride_bt, stride_cb, stride_ch, stride_cr,
    DECODE_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, INT8: tl.constexpr,
    PARTIAL: tl.constexpr, DOT_PRECISION: tl.constexpr,
):
    for item in tl.range(tl.program_id(0), n_items, tl.num_programs(0)):
        split = item % num_splits
        kv_head = (item // num_splits) % num_kv_heads
        request = item // (num_splits * num_kv_heads)
        seq_len = tl.load(seq_lens + request)
        start = split * split_len
        end = tl.minimum(start + split_len, seq_len)
        m_i, l_i, acc, head, row_ok = decode_item(
            query, key_cache, value_cache, block_tables, k_scale, v_scale, request, request, kv_head, start, end,
            qk_scale, stride_qt, stride_qh, stride_bt, stride_cb, stride_ch, stride_cr, group, head_dim,
            block_size, DECODE_M, BLOCK_N, BLOCK_D, INT8, DOT_PRECISION)
        if PARTIAL:
            # Partials are [N, Hq, S] (m, l) and [N, Hq, S, D] (acc), float32.
            part = (tl.cast(request, tl.int64) * (num_kv_heads * group) + head) * num_splits + split
            tl.store(part_m + part, m_i, mask=row_ok)
            tl.store(part_l + part, l_i, mask=row_ok)
            d = tl.arange(0, BLOCK_D)
            tl.store(part_acc + (part * head_dim)[:, None] + d[None, :], acc,
                     mask=row_ok[:, None] & (d < head_dim)[None, :])
        else:
            store_normalized(out, tl.cast(request, tl.int64) * stride_ot + head * stride_oh, row_ok, acc, l_i,
                             head_dim, BLOCK_D)


@configured(fixed=lambda **_: {}, cuda_configs=[{"num_warps": w, "num_stages": 1} for w in (1, 2, 4)],
            key=["BLOCK_D", "G_P2"])
@triton.jit
def _merge_splits_kernel(
    part_m, part_l, part_acc, out, n_items, num_kv_heads, num_splits, group, head_dim, stride_ot, stride_oh,
    G_P2: tl.constexpr, BLOCK_D: tl.constexpr,
):
    """out[r, heads of h] = merge over splits of the partial softmax states (item = (r, h))."""
    g = tl.arange(0, G_P2)
    d = tl.arange(0, BLOCK_D)
    row_ok = g < group
    tile_ok = row_ok[:, None] & (d < head_dim)[None, :]
    for item in tl.range(tl.program_id(0), n_items, tl.num_programs(0)):
        kv_head = item % num_kv_heads
        request = item // num_kv_heads
        head = kv_head * group + g
        first = (tl.cast(request, tl.int64) * (num_kv_heads * group) + head) * num_splits
        m_run = tl.full([G_P2], float("-inf"), tl.float32)
        l_run = tl.zeros([G_P2], tl.float32)
        acc = tl.zeros([G_P2, BLOCK_D], tl.float32)
        for s in range(0, num_splits):
            m_s = tl.load(part_m + first + s, mask=row_ok, other=float("-inf"))
            l_s = tl.load(part_l + first + s, mask=row_ok, other=0.0)
            a_s = tl.load(part_acc + ((first + s) * head_dim)[:, None] + d[None, :], mask=tile_ok, other=0.0)
            m_new = tl.maximum(m_run, m_s)
            m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
            alpha = tl.exp2(m_run - m_safe)
            beta = tl.exp2(m_s - m_safe)
            l_run = l_run * alpha + l_s * beta
            acc = acc * alpha[:, None] + a_s * beta[:, None]
            m_run = m_new
        store_normalized(out, tl.cast(request, tl.int64) * stride_ot + head * stride_oh, row_ok, acc, l_run,
                         head_dim, BLOCK_D)


def choose_splits(device: torch.device, num_requests: int, num_kv_heads: int, max_tokens: int) -> tuple[int, int]:
    """(num_splits, split_len) for a batch whose longest request may hold ``max_tokens`` positions.

    Enough splits that N * Hkv * splits reaches the grid, each split at least
    ``MIN_SPLIT_TOKENS`` long and at most ``MAX_SPLITS`` of them.
    """
    min_len = MIN_SPLIT_TOKENS[target(device)]
    pairs = max(1, num_requests * num_kv_heads)
    wanted = triton.cdiv(grid_size(device, 1 << 30), pairs)
    splits = max(1, min(wanted, MAX_SPLITS, triton.cdiv(max(max_tokens, 1), min_len)))
    split_len = triton.cdiv(triton.cdiv(max(max_tokens, 1), splits), min_len) * min_len
    return triton.cdiv(max(max_tokens, 1), split_len), split_len


def paged_decode_attention(*, query, key_cache, value_cache, block_tables, seq_lens, scale,
                           k_scale=None, v_scale=None) -> torch.Tensor:
    """Triton implementation of ``qwen_ops.ops.paged_decode_attention`` (arguments validated by the op).

    query: [N, Hq, D] (unit stride along D made if missing); caches: contiguous
    [NB, Hkv, Bs, D]; block_tables: [N, M] int32; seq_lens: [N] int32.
    Returns a new contiguous [N, Hq, D] tensor in the query's dtype.
    """
    n = query.shape[0]
    _, hkv, bs, _ = key_cache.shape
    out = torch.empty_like(query, memory_format=torch.contiguous_format)
    if n == 0:
        return out
    query = rows_view(query)
    block_tables = rows_view(block_tables)
    seq_lens = seq_lens.contiguous()
    geo = Geometry.of(query, hkv)
    k_scale, v_scale, int8 = scale_pointers(key_cache, k_scale, v_scale, seq_lens)
    device = query.device
    num_splits, split_len = choose_splits(device, n, hkv, block_tables.shape[1] * bs)
    partial = num_splits > 1
    if partial:
        part_m = torch.empty(n, geo.num_q_heads, num_splits, device=device, dtype=torch.float32)
        part_l = torch.empty_like(part_m)
        part_acc = torch.empty(n, geo.num_q_heads, num_splits, geo.head_dim, device=device, dtype=torch.float32)
    else:
        part_m = part_l = part_acc = out
    n_items = n * hkv * num_splits
    _decode_kernel.launch(
        device, n_items,
        query, key_cache, value_cache, block_tables, seq_lens, k_scale, v_scale, out, part_m, part_l, part_acc,
        n_items, hkv, num_splits, split_len, scale * LOG2E, geo.group, geo.head_dim, bs,
        query.stride(0), query.stride(1), out.stride(0), out.stride(1), block_tables.stride(0),
        key_cache.stride(0), key_cache.stride(1), key_cache.stride(2),
        shape=dict(rows=geo.decode_m, block_d=geo.block_d, elem_bytes=geo.elem_bytes, int8=int8,
                   device_kind=target(device)),
        DECODE_M=geo.decode_m, BLOCK_D=geo.block_d, INT8=int8, PARTIAL=partial,
        DOT_PRECISION=dot_precision(target(device), query.dtype),
    )
    if partial:
        _merge_splits_kernel.launch(
            device, n * hkv, part_m, part_l, part_acc, out, n * hkv, hkv, num_splits, geo.group, geo.head_dim,
            out.stride(0), out.stride(1), G_P2=geo.g_p2, BLOCK_D=geo.block_d,
        )
    return out
