"""What the three Triton attention kernels share: inner loops, row layouts, host-side choices.

Tiles. A work item computes a tile of ``rows`` query rows for ONE KV head, so
that every K/V tile it loads serves all query heads of the GQA group (G = Hq /
Hkv heads) at once:

* decode rows (``decode_item``): the G heads of one token, padded to
  ``DECODE_M = max(16, next_pow2(G))`` rows. Padding to 16 keeps every
  ``tl.dot`` dimension >= 16 (the rule of the Triton backends); the padded
  rows are masked and cost no memory traffic, and decode is bound by reading
  K/V, not by the matrix unit. (A broadcast multiply + sum would avoid the
  padding but leave the matrix units unused; it was not chosen.)
* prefill rows (``prefill_item``): ``BLOCK_T = BLOCK_M / G_P2`` consecutive
  new tokens times ``G_P2 = next_pow2(G)`` heads, row ``i`` being token
  ``i // G_P2``, head ``i % G_P2`` of the group.

Loops. ``attend_paged`` streams K/V of cached positions ``[start, end)`` of
one request, ``BLOCK_N`` at a time, looking each position's block up in the
block table (any block size works, a tile may straddle blocks); int8 blocks
are dequantized (``q * scale`` in float32, then the query's dtype) before the
dot. ``attend_new`` streams the request's new keys/values straight from
``key``/``value`` with the causal mask. Both feed ``online_softmax_update``:
scores in float32 (base-2 exponent, the softmax scale times log2(e) folded
into one multiply), running max ``m``, running sum ``l`` and the unnormalised
output ``acc`` in float32. ``P`` is cast to the value dtype for the second
dot (as in flash attention). Every dot passes ``DOT_PRECISION``, the host's
``_triton.dot_precision`` for the query dtype (IEEE for float32 inputs).

Ascend unified buffer, bytes per buffer of one loop iteration
(``ascend_tile_bytes``; e = element bytes of the query dtype): Q tile
``M*D*e``, K and V tiles ``2*N*D*e`` (+ ``2*N*D*(1+4)`` for the int8 load and
its float32 dequantisation; ``2*N*D*1`` when the query is float32), scores and
P ``M*N*(4+e)``, ``acc`` ``M*D*4``, ``m``/``l`` ``8*M`` and the block ids and
offsets ``12*N``. The host picks the largest prefill ``BLOCK_M``, then the
largest ``BLOCK_N``, whose two buffers fit 192 KiB. By this formula, D = 256,
float16, M = 16 decode rows: N = 64 (97,152 bytes per buffer) for a float
cache, N = 16 (83,776 bytes) for an int8 cache; prefill D = 256 float16:
M = 32, N = 32 (88,704 bytes). Groups up to 16 heads fit at D <= 256.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from .._triton import ASCEND_UB_BYTES, target
from .._validate import values_checked

LOG2E = 1.4426950408889634

# Column tile (BLOCK_N) under the interpreter: small, so that the short test
# sequences still run several loop iterations and straddle cache blocks.
INTERPRETER_BLOCK_N = 16
# Row tile of prefill items per target (the Ascend one may shrink to fit the UB).
PREFILL_ROWS = {"interpreter": 16, "cuda": 64, "npu": 64}
# Autotuned on CUDA. Few on purpose: each config is one more compilation per
# kernel variant. The first is the one a single-config launch would use.
CUDA_CONFIGS = [
    {"BLOCK_N": 64, "num_warps": 4, "num_stages": 2},
    {"BLOCK_N": 32, "num_warps": 4, "num_stages": 2},
    {"BLOCK_N": 64, "num_warps": 8, "num_stages": 2},
    {"BLOCK_N": 32, "num_warps": 8, "num_stages": 3},
]
ASCEND_BLOCK_N = (128, 64, 32, 16)


# ----------------------------------------------------------------------------- device code


@triton.jit
def online_softmax_update(s, visible, m_i, l_i, acc, v, DOT_PRECISION: tl.constexpr):
    """Fold one tile of scores into the running softmax state.

    s: [M, N] float32 scores in log2 units; visible: [M, N] or [1, N] bool;
    m_i, l_i: [M] float32; acc: [M, D] float32; v: [N, D].
    A row that has seen nothing keeps ``m = -inf`` and ``l = 0`` (the safe max
    avoids ``-inf - -inf``).
    """
    s = tl.where(visible, s, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(s, 1))
    m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
    alpha = tl.exp2(m_i - m_safe)
    p = tl.exp2(s - m_safe[:, None])
    l_i = l_i * alpha + tl.sum(p, 1)
    acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None], input_precision=DOT_PRECISION)
    return m_new, l_i, acc


@triton.jit
def attend_paged(q, m_i, l_i, acc, key_cache, value_cache, block_table_row, head_offset, k_scale_row,
                 v_scale_row, start, end, qk_scale, block_size, stride_cb, stride_cr, head_dim,
                 BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, INT8: tl.constexpr,
                 DOT_PRECISION: tl.constexpr):
    """Attend the rows ``q`` [M, BLOCK_D] to cached positions ``[start, end)`` of one request.

    ``block_table_row`` points at the request's row of ``block_tables``;
    ``head_offset`` (int64) is ``kv_head * stride_ch``; the scale rows point
    at ``k_scale[kv_head]`` / ``v_scale[kv_head]`` (unused for float caches).
    """
    d = tl.arange(0, BLOCK_D)
    d_ok = d < head_dim
    cols = tl.arange(0, BLOCK_N)
    if INT8:
        ks = tl.load(k_scale_row + d, mask=d_ok, other=0.0)
        vs = tl.load(v_scale_row + d, mask=d_ok, other=0.0)
    for n0 in range(start, end, BLOCK_N):
        pos = n0 + cols
        valid = pos < end
        block = tl.load(block_table_row + pos // block_size, mask=valid, other=0)
        row = tl.cast(block, tl.int64) * stride_cb + head_offset + (pos % block_size) * stride_cr
        # K is loaded transposed ([D, N]) so the score dot needs no tl.trans.
        k_t = tl.load(key_cache + row[None, :] + d[:, None], mask=d_ok[:, None] & valid[None, :], other=0)
        v = tl.load(value_cache + row[:, None] + d[None, :], mask=valid[:, None] & d_ok[None, :], other=0)
        if INT8:
            k_t = (k_t.to(tl.float32) * ks[:, None]).to(q.dtype)
            v = (v.to(tl.float32) * vs[None, :]).to(q.dtype)
        s = tl.dot(q, k_t, input_precision=DOT_PRECISION) * qk_scale
        m_i, l_i, acc = online_softmax_update(s, valid[None, :], m_i, l_i, acc, v, DOT_PRECISION)
    return m_i, l_i, acc


@triton.jit
def attend_new(q, m_i, l_i, acc, key, value, row_token, n_keys, stride_kt, stride_vt, qk_scale, head_dim,
               CAUSAL: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
               DOT_PRECISION: tl.constexpr):
    """Attend ``q`` to new tokens ``0..n_keys-1`` of one request, read from ``key``/``value``.

    ``key``/``value`` point at the request's first new token and the KV head;
    ``row_token`` [M] is each row's token index within the request (the
    causal limit).
    """
    d = tl.arange(0, BLOCK_D)
    d_ok = d < head_dim
    cols = tl.arange(0, BLOCK_N)
    for n0 in range(0, n_keys, BLOCK_N):
        j = n0 + cols
        valid = j < n_keys
        j64 = tl.cast(j, tl.int64)
        k_t = tl.load(key + (j64 * stride_kt)[None, :] + d[:, None], mask=d_ok[:, None] & valid[None, :], other=0)
        v = tl.load(value + (j64 * stride_vt)[:, None] + d[None, :], mask=valid[:, None] & d_ok[None, :], other=0)
        s = tl.dot(q, k_t, input_precision=DOT_PRECISION) * qk_scale
        if CAUSAL:
            visible = valid[None, :] & (j[None, :] <= row_token[:, None])
        else:
            visible = valid[None, :]
        m_i, l_i, acc = online_softmax_update(s, visible, m_i, l_i, acc, v, DOT_PRECISION)
    return m_i, l_i, acc


@triton.jit
def store_normalized(out, row_offsets, row_ok, acc, l_i, head_dim, BLOCK_D: tl.constexpr):
    """out[row] = acc / l for the rows in ``row_ok``; a row that saw no key (l = 0) gets zeros."""
    d = tl.arange(0, BLOCK_D)
    o = acc / tl.where(l_i > 0, l_i, 1.0)[:, None]
    tl.store(out + row_offsets[:, None] + d[None, :], o.to(out.dtype.element_ty),
             mask=row_ok[:, None] & (d < head_dim)[None, :])


@triton.jit
def load_rows(x, row_offsets, row_ok, head_dim, BLOCK_D: tl.constexpr):
    d = tl.arange(0, BLOCK_D)
    return tl.load(x + row_offsets[:, None] + d[None, :], mask=row_ok[:, None] & (d < head_dim)[None, :],
                   other=0.0)


@triton.jit
def decode_item(query, key_cache, value_cache, block_tables, k_scale, v_scale,
                request, token, kv_head, start, end, qk_scale,
                stride_qt, stride_qh, stride_bt, stride_cb, stride_ch, stride_cr,
                group, head_dim, block_size,
                DECODE_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
                INT8: tl.constexpr, DOT_PRECISION: tl.constexpr):
    """One decode token's G query heads of ``kv_head`` over cached positions ``[start, end)``.

    Returns (m, l, acc, head, row_ok): the softmax state of the DECODE_M rows,
    each row's query head and whether the row is a real head.
    """
    g = tl.arange(0, DECODE_M)
    row_ok = g < group
    head = kv_head * group + g
    q = load_rows(query, tl.cast(token, tl.int64) * stride_qt + head * stride_qh, row_ok, head_dim, BLOCK_D)
    m_i = tl.full([DECODE_M], float("-inf"), tl.float32)
    l_i = tl.zeros([DECODE_M], tl.float32)
    acc = tl.zeros([DECODE_M, BLOCK_D], tl.float32)
    m_i, l_i, acc = attend_paged(
        q, m_i, l_i, acc, key_cache, value_cache, block_tables + tl.cast(request, tl.int64) * stride_bt,
        tl.cast(kv_head, tl.int64) * stride_ch, k_scale + kv_head * head_dim, v_scale + kv_head * head_dim,
        start, end, qk_scale, block_size, stride_cb, stride_cr, head_dim, BLOCK_N, BLOCK_D, INT8, DOT_PRECISION)
    return m_i, l_i, acc, head, row_ok


@triton.jit
def prefill_item(out, query, key, value, key_cache, value_cache, block_tables, k_scale, v_scale,
                 request, q_block, kv_head, q_start, q_len, context_len, qk_scale,
                 stride_qt, stride_qh, stride_kt, stride_kh, stride_vt, stride_vh, stride_ot, stride_oh,
                 stride_bt, stride_cb, stride_ch, stride_cr, group, head_dim, block_size,
                 BLOCK_M: tl.constexpr, G_P2: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
                 INT8: tl.constexpr, CAUSAL: tl.constexpr, DOT_PRECISION: tl.constexpr):
    """Rows of ``BLOCK_M / G_P2`` new tokens (block ``q_block`` of the request) times the group's heads.

    Attends to the first ``context_len`` cached tokens of ``request`` and to
    the request's new tokens (causally if ``CAUSAL``), then writes ``out``.
    """
    BLOCK_T = BLOCK_M // G_P2
    rows = tl.arange(0, BLOCK_M)
    g = rows % G_P2
    t_local = q_block * BLOCK_T + rows // G_P2
    row_ok = (t_local < q_len) & (g < group)
    head = kv_head * group + g
    token = tl.cast(q_start + t_local, tl.int64)
    q = load_rows(query, token * stride_qt + head * stride_qh, row_ok, head_dim, BLOCK_D)
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
    m_i, l_i, acc = attend_paged(
        q, m_i, l_i, acc, key_cache, value_cache, block_tables + tl.cast(request, tl.int64) * stride_bt,
        tl.cast(kv_head, tl.int64) * stride_ch, k_scale + kv_head * head_dim, v_scale + kv_head * head_dim,
        0, context_len, qk_scale, block_size, stride_cb, stride_cr, head_dim, BLOCK_N, BLOCK_D, INT8,
        DOT_PRECISION)
    if CAUSAL:  # the last token of this block sees new tokens 0..its index
        n_keys = tl.minimum(q_len, (q_block + 1) * BLOCK_T)
    else:
        n_keys = q_len
    first = tl.cast(q_start, tl.int64)
    m_i, l_i, acc = attend_new(
        q, m_i, l_i, acc, key + first * stride_kt + kv_head * stride_kh, value + first * stride_vt + kv_head * stride_vh,
        t_local, n_keys, stride_kt, stride_vt, qk_scale, head_dim, CAUSAL, BLOCK_N, BLOCK_D, DOT_PRECISION)
    store_normalized(out, token * stride_ot + head * stride_oh, row_ok, acc, l_i, head_dim, BLOCK_D)


# ----------------------------------------------------------------------------- host side


def rows_view(x: torch.Tensor) -> torch.Tensor:
    """``x`` with unit stride along the last dim (kernels index D directly); other strides are kept."""
    return x if x.stride(-1) == 1 else x.contiguous()


@dataclass(frozen=True)
class Geometry:
    """Sizes every attention launch needs, derived from the query and the KV heads."""

    num_q_heads: int
    num_kv_heads: int
    head_dim: int
    group: int
    g_p2: int
    block_d: int
    decode_m: int
    elem_bytes: int

    @classmethod
    def of(cls, query: torch.Tensor, num_kv_heads: int) -> "Geometry":
        hq, d = query.shape[1], query.shape[2]
        group = hq // num_kv_heads
        g_p2 = triton.next_power_of_2(group)
        return cls(hq, num_kv_heads, d, group, g_p2, triton.next_power_of_2(d), max(16, g_p2),
                   query.element_size())


def ascend_tile_bytes(rows: int, block_n: int, block_d: int, elem_bytes: int, int8: bool) -> int:
    """Unified-buffer bytes of one loop iteration's tiles (formula in the module doc)."""
    # int8: the loaded tile, plus its float32 dequantisation unless that already is the compute dtype.
    kv = 2 * block_n * block_d * (elem_bytes + ((1 + 4 if elem_bytes != 4 else 1) if int8 else 0))
    return (rows * block_d * elem_bytes + kv + rows * block_n * (4 + elem_bytes) + rows * block_d * 4
            + 8 * rows + 12 * block_n)


def ascend_block_n(rows: int, block_d: int, elem_bytes: int, int8: bool) -> int:
    """Largest column tile whose double buffer fits the Ascend UB (16 at least)."""
    for n in ASCEND_BLOCK_N:
        if 2 * ascend_tile_bytes(rows, n, block_d, elem_bytes, int8) <= ASCEND_UB_BYTES:
            return n
    return ASCEND_BLOCK_N[-1]


def prefill_rows(device_kind: str, decode_m: int, block_d: int, elem_bytes: int, int8: bool) -> int:
    """BLOCK_M of prefill items: at least the decode tile (16 and the group), shrunk on Ascend to fit the UB."""
    rows = max(PREFILL_ROWS[device_kind], decode_m)
    if device_kind == "cuda" and elem_bytes == 4:
        # IEEE float32 dots are unrolled FMA loops on CUDA: compiling the
        # prefill kernel for sm_90 at D = 256 took about 160 s with 64 rows and
        # 50 s with 16 on the (2-core) development machine.
        rows = decode_m
    if device_kind == "npu":
        while rows > decode_m and 2 * ascend_tile_bytes(rows, 16, block_d, elem_bytes, int8) > ASCEND_UB_BYTES:
            rows //= 2
    return rows


def fixed_config(rows: int, block_d: int, elem_bytes: int, int8: bool, device_kind: str) -> dict:
    """Config of the interpreter and Ascend (CUDA autotunes over ``CUDA_CONFIGS``)."""
    if device_kind == "npu":
        return {"BLOCK_N": ascend_block_n(rows, block_d, elem_bytes, int8)}
    return {"BLOCK_N": INTERPRETER_BLOCK_N}


def scale_pointers(key_cache: torch.Tensor, k_scale, v_scale, fallback: torch.Tensor):
    """(k_scale, v_scale, int8): contiguous scales for int8 caches, a dummy pointer otherwise."""
    if key_cache.dtype == torch.int8:
        return k_scale.contiguous(), v_scale.contiguous(), True
    return fallback, fallback, False


def prefill_units(query_start_loc: torch.Tensor, first: int, block_t: int) -> torch.Tensor:
    """[U, 2] int32 (request, q_block) for requests ``first..N-1``: one unit per ``block_t`` new tokens.

    Built on the host, returned on ``query_start_loc``'s device: on a device
    this reads the N+1 offsets back (a sync), so an engine builds the units
    once per step from its CPU offsets (``prefill_units_for``) and passes them.
    """
    starts = query_start_loc.cpu().to(torch.int64)
    blocks = ((starts[1:] - starts[:-1] + block_t - 1) // block_t)[first:]
    requests = torch.arange(first, first + blocks.numel()).repeat_interleave(blocks)
    first_unit = (torch.cumsum(blocks, 0) - blocks).repeat_interleave(blocks)
    q_blocks = torch.arange(requests.numel()) - first_unit
    return torch.stack([requests, q_blocks], dim=1).to(torch.int32).to(query_start_loc.device)


def prefill_block_tokens(device: torch.device, dtype: torch.dtype, num_q_heads: int, num_kv_heads: int,
                         head_dim: int, int8: bool) -> int:
    """New tokens per prefill unit (BLOCK_M / G_P2) of the prefill and mixed kernels for these shapes."""
    geo = Geometry.of(torch.empty((0, num_q_heads, head_dim), dtype=dtype, device="meta"), num_kv_heads)
    return prefill_rows(target(device), geo.decode_m, geo.block_d, geo.elem_bytes, int8) // geo.g_p2


def given_or_own_units(op: str, given, query_start_loc: torch.Tensor, first: int, block_t: int) -> torch.Tensor:
    """The engine's units when given (checked against our own when values are checked), else our own."""
    if given is None:
        return prefill_units(query_start_loc, first, block_t)
    if values_checked(given.device) and not torch.equal(given, prefill_units(query_start_loc, first, block_t)):
        raise ValueError(f"{op}: argument 'prefill_units' is not the unit table of 'query_start_loc' for these "
                         f"shapes (prefill_units_for gives it: {block_t} new tokens per unit)")
    return given
