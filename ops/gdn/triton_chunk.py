"""Triton ``chunk_gated_delta_rule``: the delta rule over chunks of 64 tokens.

The algorithm is the one of ``ops/gdn/reference_chunk.py``. Within a chunk of L <= 64
tokens of one (sequence, value head), with ``G`` the inclusive cumulative sum
of g, ``Gam = exp(G)`` and k, q the (l2-normalised when asked) rows:

* ``A[i, j] = beta_i (k_i . k_j) exp(G_i - G_j)`` for j < i (else 0), and
  ``Tinv = (I + A)^-1``, unit lower triangular;
* ``w = Tinv (beta Gam k)`` [L, Dk] and ``u = Tinv (beta v)`` [L, Dv];
* from the state S at the chunk start: ``v_new = u - w S``,
  ``o = scale (Gam q) S + Aqk v_new`` with
  ``Aqk[i, j] = scale (q_i . k_j) exp(G_i - G_j)`` for j <= i,
  and the next state ``exp(G_L) S + (exp(G_L - G) k)^T v_new``.

Four launches, each on a persistent grid; the first three have one item per
(chunk, value head), all in parallel:

1. ``_chunk_prep_kernel``: G, ``K K^T`` and ``Q K^T`` of the raw rows (64 x 64
   tiles over Dk blocks) with the squared row norms, then A (float32) and Aqk
   (model dtype) to workspaces, with the per-row factors the later launches
   need (``scale Gam / |q|``, ``exp(G_L - G) / |k|``, ``beta Gam / |k|``) and
   the chunk's decay ``exp(G_L)``.
2. ``_chunk_solve_kernel``: ``Tinv = (I + A)^-1`` in float32, written as
   ``Tinv diag(beta Gam / |k|)`` and ``Tinv diag(beta)`` in the model dtype.
3. ``_chunk_wu_kernel``: ``w = Tinv diag(beta Gam / |k|) k`` (model dtype) and
   ``u = Tinv diag(beta) v`` (float32), over Dk and Dv blocks.
4. ``_chunk_state_kernel``, one item per (sequence, value head, Dv block):
   walks the sequence's chunks in order with S [Dk, BLOCK_V] in registers,
   producing that chunk's outputs and the next state. Outputs are computed
   here rather than in a fifth launch so no per-chunk state has to be stored
   (for 8k tokens, 32 heads and 128 x 128 states that would be 268 MB).

Split this way, no launch holds more than a few 64 x 64 tiles: on sm_90 every
config of the four compiles without a spill in seconds
(``bench/toolchains/sm90_check.py``), where the earlier two-launch float32
form spilled 74,892 B (prep, first config) and took 452 s to compile
(bench/RESULTS.md, "Toolchain checks").

Precision (as fla's chunk kernels): every ``tl.dot`` of q, k, v or a
model-dtype workspace takes its operands in the model's dtype and accumulates
in float32 (``dot_f32_acc`` with the host's ``_triton.dot_precision``): tensor
cores for bfloat16/float16, IEEE float32 products for float32 inputs.
Everything else (gates, exp, cumulative sums, l2 norms, the inverse, the state
S) is float32. The dots read the raw q, k, v (exact in their dtype); the
float32 row and column factors (beta, decays, 1/|k|, 1/|q|, scale) are applied
to the other operand or to the float32 product, so what is rounded to the
model's dtype is only: Tinv with its column factors, w and Aqk (stored in the
model's dtype), S, v_new and its row factors (``tests/gdn_chunk_rounding.py``
models exactly these). The inverse's dots take float32 operands with
``_triton.float32_dot_precision``: IEEE for float32 models and on Ascend, 3xTF32
(tensor cores, about float32's accuracy) on CUDA for 16-bit models.

The inverse works on 16 x 16 blocks of A held as separate tiles (Triton cannot
slice a register tile): the four diagonal blocks are inverted together by
forward substitution (one row per step of a loop of 15 steps, each on the
whole tiles with masks), the blocks below by block forward substitution
``Tinv[r, c] = -Tinv[r, r] sum_{c<=m<r} A[r, m] Tinv[m, c]``, block row by block
row, each block stored with its column factors as soon as it is known.

Ascend UB, bytes per buffer, float32 inputs (the worst case; 16-bit halves the
q/k/v tiles), fixed config BLOCK_K = BLOCK_V = 64; estimates from the tile
sizes (not compiled for Ascend here: triton-ascend's front end only):
* prep: in the Dk loop the two 64 x 64 accumulators and the q and k tiles
  (16 KiB each, 64 KiB); after it the accumulators, the decay tile, A and Aqk
  (80 KiB): within a double-buffered 192 KiB UB.
* solve: 16 x 16 float32 tiles (1 KiB each), at most about 20 live: ~20 KiB.
* w/u: the 64 x 64 factored Tinv, one 64 x 64 k or v tile and the product:
  ~48 KiB.
* state: S Dk x BLOCK_V (16 KiB for Dk = 128, BLOCK_V = 32) and its rounded
  copy, one 64 x Dk tile of w, q or k live at a time (32 KiB for Dk = 128),
  Aqk (16 KiB) and three 64 x BLOCK_V tiles (u, v_new, o: 24 KiB): about
  104 KiB for Dk = 128 float32, 72 KiB for 16-bit inputs. Dk = 256 doubles the
  w/q/k tile, so the fixed config halves BLOCK_V to 16 there; Dk = 256 on
  Ascend still needs the Dk-wide tiles split (not done; Qwen3.5's GDN has
  Dk = 128).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from .._triton import and_flag, configured, dot_precision, float32_dot_precision, target
from .chunk_table import CHUNK, prepare_chunk_indices
from .triton_common import L2NORM_EPS, dot_f32_acc, prepare_launch, tile

SUB = tl.constexpr(16)  # diagonal block size of the inverse: the smallest tl.dot dimension


@triton.jit
def _load_rows(base, tok, row_ok, stride_t, cols, D):
    """``base[tok, cols]`` for token rows ``tok`` (rows outside the chunk and columns >= D read 0)."""
    ok = row_ok[:, None] & (cols < D)[None, :]
    return tl.load(base + tok[:, None] * stride_t + cols[None, :], mask=ok, other=0.0)


@triton.jit
def _store_rows(ws, ws_row, row_ok, cols, D, x):
    """Rows ``ws_row`` of a [T * HV, D] workspace, converted to its dtype."""
    ok = row_ok[:, None] & (cols < D)[None, :]
    tl.store(ws + ws_row[:, None] * D + cols[None, :], x.to(ws.dtype.element_ty), mask=ok)


@triton.jit
def _inverse_norm(sq, L2NORM: tl.constexpr, EPS: tl.constexpr):
    """1 / sqrt(sum(x^2) + EPS) per row when l2-normalising in the kernel, else 1."""
    if L2NORM:
        return 1.0 / tl.sqrt(sq + EPS)
    return tl.full(sq.shape, 1.0, tl.float32)


@triton.jit
def _substitution_step(a, inv, r, i, eye):
    """Row r of ``(I + a)^-1`` from the rows above it: ``e_r - sum_{c<r} a[r, c] inv[c, :]`` (masks: no row indexing)."""
    coeffs = tl.sum(tl.where(i == r, a, 0.0), axis=0)
    combined = tl.sum(coeffs[:, None] * inv, axis=0)
    return tl.where(i == r, eye - combined[None, :], inv)


@triton.jit
def _unit_lower_inverse_blocks(a0, a1, a2, a3):
    """``(I + a)^-1`` of four strictly lower triangular float32 [SUB, SUB] tiles, by forward substitution.

    One row per step of a loop that is not unrolled (15 steps, each on the
    four whole tiles): unrolled, the steps made the kernel's code (and its
    compile time and registers on sm_90) several times larger.
    """
    i = tl.arange(0, SUB)[:, None]
    j = tl.arange(0, SUB)[None, :]
    eye = tl.where(i == j, 1.0, 0.0)
    inv0 = eye
    inv1 = eye
    inv2 = eye
    inv3 = eye
    for r in tl.range(1, SUB):
        inv0 = _substitution_step(a0, inv0, r, i, eye)
        inv1 = _substitution_step(a1, inv1, r, i, eye)
        inv2 = _substitution_step(a2, inv2, r, i, eye)
        inv3 = _substitution_step(a3, inv3, r, i, eye)
    return inv0, inv1, inv2, inv3


@triton.jit
def _dot32(a, b, PRECISION: tl.constexpr):
    """A float32 product of two 16 x 16 blocks of the inverse, whose error every w and u row inherits."""
    return dot_f32_acc(a, b, tl.float32, PRECISION, False)


@triton.jit
def _load_block(ws, start, length, head, R: tl.constexpr, C: tl.constexpr, HV: tl.constexpr, BT: tl.constexpr):
    """Block (R, C) [SUB, SUB] of a chunk's [BT, BT] rows in a [T * HV, BT] float32 workspace (rows past it: 0)."""
    rows = tl.arange(0, SUB) + R * SUB  # tensor first: the interpreter keeps constexpr + tensor a constexpr
    return _load_rows(ws, (start + rows) * HV + head, rows < length, BT, tl.arange(0, SUB) + C * SUB, BT)


@triton.jit
def _store_factored(tk_ws, tv_ws, t, w_gain_ws, beta, stride_b_t, start, length, head, R: tl.constexpr,
                    C: tl.constexpr, HV: tl.constexpr, BT: tl.constexpr):
    """Block (R, C) of Tinv as ``t diag(beta Gam / |k|)`` and ``t diag(beta)`` into two [T * HV, BT] workspaces.

    The column factors of column block C are read here, per block (16 floats each, from cache).
    """
    rows = tl.arange(0, SUB) + R * SUB  # tensor first: the interpreter keeps constexpr + tensor a constexpr
    ws_row = (start + rows) * HV + head
    cols = tl.arange(0, SUB) + C * SUB
    w_gain = _load_block_gain(w_gain_ws, start, length, head, HV, C)
    beta_c = _load_block_gain(beta, start, length, head, stride_b_t, C)
    _store_rows(tk_ws, ws_row, rows < length, cols, BT, t * w_gain[None, :])
    _store_rows(tv_ws, ws_row, rows < length, cols, BT, t * beta_c[None, :])


@triton.jit
def _load_block_gain(ptr, start, length, head, stride_t, C: tl.constexpr):
    """A per-row float32 factor (``ptr[token * stride_t + head]``) over the rows of block C (rows past the chunk: 0)."""
    rows = tl.arange(0, SUB) + C * SUB
    return tl.load(ptr + (start + rows) * stride_t + head, mask=rows < length, other=0.0).to(tl.float32)


def _prep_fixed(**_shape) -> dict:
    # 64-wide Dk blocks: the 64 x 64 tiles bound the UB use (module doc).
    return {"BLOCK_K": 64}


@configured(
    fixed=_prep_fixed,
    cuda_configs=[{"BLOCK_K": 64, "num_warps": 4}, {"BLOCK_K": 128, "num_warps": 4}],
    key=["HV", "DK"],
)
@triton.jit
def _chunk_prep_kernel(
    q, k, g, beta, chunks, chunk_decay_ws, q_gain_ws, k_gain_ws, aqk_ws, a_ws, w_gain_ws,
    scale, n_chunks,
    stride_q_t, stride_q_h, stride_k_t, stride_k_h, stride_g_t, stride_b_t,
    HK: tl.constexpr, HV: tl.constexpr, DK: tl.constexpr,
    BT: tl.constexpr, BLOCK_K: tl.constexpr,
    L2NORM: tl.constexpr, EPS: tl.constexpr, DOT_PRECISION: tl.constexpr, UPCAST_DOTS: tl.constexpr,
):
    DOT: tl.constexpr = q.dtype.element_ty
    rows = tl.arange(0, BT)
    i = rows[:, None]
    j = rows[None, :]
    for item in tl.range(tl.program_id(0), n_chunks * HV, tl.num_programs(0)):
        chunk = item // HV
        head = item % HV
        q_base = q + (head // (HV // HK)) * stride_q_h
        k_base = k + (head // (HV // HK)) * stride_k_h
        start = tl.load(chunks + 2 * chunk).to(tl.int64)
        length = tl.load(chunks + 2 * chunk + 1) - tl.load(chunks + 2 * chunk)
        row_ok = rows < length
        tok = start + rows  # int64 token index of each row
        ws_row = tok * HV + head
        g_row = tl.load(g + tok * stride_g_t + head, mask=row_ok, other=0.0).to(tl.float32)
        beta_row = tl.load(beta + tok * stride_b_t + head, mask=row_ok, other=0.0).to(tl.float32)
        gcum = tl.cumsum(g_row, axis=0)
        g_last = tl.sum(g_row, axis=0)  # G at the chunk's last row (rows past it add 0)
        # K K^T and Q K^T of the raw rows over Dk blocks, with the squared row norms for the l2norm.
        kk = tl.zeros([BT, BT], dtype=tl.float32)
        qk = tl.zeros([BT, BT], dtype=tl.float32)
        k_sq = tl.zeros([BT], dtype=tl.float32)
        q_sq = tl.zeros([BT], dtype=tl.float32)
        for k0 in tl.static_range(0, DK, BLOCK_K):
            cols = k0 + tl.arange(0, BLOCK_K)
            k_blk = _load_rows(k_base, tok, row_ok, stride_k_t, cols, DK)
            q_blk = _load_rows(q_base, tok, row_ok, stride_q_t, cols, DK)
            kk += dot_f32_acc(k_blk, tl.trans(k_blk), DOT, DOT_PRECISION, UPCAST_DOTS)
            qk += dot_f32_acc(q_blk, tl.trans(k_blk), DOT, DOT_PRECISION, UPCAST_DOTS)
            k_sq += tl.sum(k_blk.to(tl.float32) * k_blk.to(tl.float32), axis=1)
            q_sq += tl.sum(q_blk.to(tl.float32) * q_blk.to(tl.float32), axis=1)
        k_inv_norm = _inverse_norm(k_sq, L2NORM, EPS)
        q_inv_norm = _inverse_norm(q_sq, L2NORM, EPS)
        # exp(G_i - G_j) only where j <= i: above the diagonal it could overflow.
        decay = tl.exp(tl.where(j <= i, gcum[:, None] - gcum[None, :], 0.0))
        a = tl.where(j < i, kk * (beta_row * k_inv_norm)[:, None] * k_inv_norm[None, :] * decay, 0.0)
        aqk = tl.where(j <= i, qk * (scale * q_inv_norm)[:, None] * k_inv_norm[None, :] * decay, 0.0)
        _store_rows(aqk_ws, ws_row, row_ok, rows, BT, aqk)
        # Row factors the state launch applies around its dots with the raw q and k.
        tl.store(q_gain_ws + ws_row, scale * tl.exp(gcum) * q_inv_norm, mask=row_ok)
        tl.store(k_gain_ws + ws_row, tl.exp(g_last - gcum) * k_inv_norm, mask=row_ok)
        tl.store(chunk_decay_ws + chunk * HV + head, tl.exp(g_last))
        _store_rows(a_ws, ws_row, row_ok, rows, BT, a)
        tl.store(w_gain_ws + ws_row, beta_row * tl.exp(gcum) * k_inv_norm, mask=row_ok)


def _solve_fixed(**_shape) -> dict:
    return {}


# 16 x 16 float32 tiles: 4 or 8 warps spread each block's reductions (no spills on sm_90 with 1 to 8 warps;
# with CUDA_PROGRAMS_PER_SM programs per SM, fewer warps would leave the SMs mostly idle).
@configured(fixed=_solve_fixed, cuda_configs=[{"num_warps": 4}, {"num_warps": 8}], key=["HV"])
@triton.jit
def _chunk_solve_kernel(beta, chunks, a_ws, w_gain_ws, tk_ws, tv_ws, n_chunks, stride_b_t,
                        HV: tl.constexpr, BT: tl.constexpr, DOT_PRECISION: tl.constexpr):
    """Tinv = (I + A)^-1 per (chunk, value head) in 16 x 16 blocks, stored as Tinv diag(beta Gam / |k|) and Tinv diag(beta).

    The diagonal blocks by forward substitution, those below by block forward
    substitution ``Tinv[r, c] = -Tinv[r, r] sum_{c<=m<r} A[r, m] Tinv[m, c]``,
    all in float32. Blocks above the diagonal are not written: the w/u launch
    masks them.
    """
    tl.static_assert(BT == 4 * SUB, "the inverse is written for four diagonal blocks")
    for item in tl.range(tl.program_id(0), n_chunks * HV, tl.num_programs(0)):
        chunk = item // HV
        head = item % HV
        start = tl.load(chunks + 2 * chunk).to(tl.int64)
        length = tl.load(chunks + 2 * chunk + 1) - tl.load(chunks + 2 * chunk)
        t00, t11, t22, t33 = _unit_lower_inverse_blocks(
            _load_block(a_ws, start, length, head, 0, 0, HV, BT), _load_block(a_ws, start, length, head, 1, 1, HV, BT),
            _load_block(a_ws, start, length, head, 2, 2, HV, BT), _load_block(a_ws, start, length, head, 3, 3, HV, BT))
        # Block row by block row, each block stored as soon as it is known (fewer tiles live at once).
        _store_factored(tk_ws, tv_ws, t00, w_gain_ws, beta, stride_b_t, start, length, head, 0, 0, HV, BT)
        # P: the precision of these float32 products (the host's float32_dot_precision).
        P: tl.constexpr = DOT_PRECISION
        a10 = _load_block(a_ws, start, length, head, 1, 0, HV, BT)
        t10 = -_dot32(t11, _dot32(a10, t00, P), P)
        _store_factored(tk_ws, tv_ws, t10, w_gain_ws, beta, stride_b_t, start, length, head, 1, 0, HV, BT)
        _store_factored(tk_ws, tv_ws, t11, w_gain_ws, beta, stride_b_t, start, length, head, 1, 1, HV, BT)
        a20 = _load_block(a_ws, start, length, head, 2, 0, HV, BT)
        a21 = _load_block(a_ws, start, length, head, 2, 1, HV, BT)
        t20 = -_dot32(t22, _dot32(a20, t00, P) + _dot32(a21, t10, P), P)
        t21 = -_dot32(t22, _dot32(a21, t11, P), P)
        _store_factored(tk_ws, tv_ws, t20, w_gain_ws, beta, stride_b_t, start, length, head, 2, 0, HV, BT)
        _store_factored(tk_ws, tv_ws, t21, w_gain_ws, beta, stride_b_t, start, length, head, 2, 1, HV, BT)
        _store_factored(tk_ws, tv_ws, t22, w_gain_ws, beta, stride_b_t, start, length, head, 2, 2, HV, BT)
        a30 = _load_block(a_ws, start, length, head, 3, 0, HV, BT)
        a31 = _load_block(a_ws, start, length, head, 3, 1, HV, BT)
        a32 = _load_block(a_ws, start, length, head, 3, 2, HV, BT)
        t30 = -_dot32(t33, _dot32(a30, t00, P) + _dot32(a31, t10, P) + _dot32(a32, t20, P), P)
        t31 = -_dot32(t33, _dot32(a31, t11, P) + _dot32(a32, t21, P), P)
        t32 = -_dot32(t33, _dot32(a32, t22, P), P)
        _store_factored(tk_ws, tv_ws, t30, w_gain_ws, beta, stride_b_t, start, length, head, 3, 0, HV, BT)
        _store_factored(tk_ws, tv_ws, t31, w_gain_ws, beta, stride_b_t, start, length, head, 3, 1, HV, BT)
        _store_factored(tk_ws, tv_ws, t32, w_gain_ws, beta, stride_b_t, start, length, head, 3, 2, HV, BT)
        _store_factored(tk_ws, tv_ws, t33, w_gain_ws, beta, stride_b_t, start, length, head, 3, 3, HV, BT)


def _wu_fixed(**_shape) -> dict:
    # 64-wide Dk/Dv blocks, as the prep's tiles (module doc).
    return {"BLOCK_K": 64, "BLOCK_V": 64}


@configured(
    fixed=_wu_fixed,
    cuda_configs=[{"BLOCK_K": 64, "BLOCK_V": 64, "num_warps": 4}, {"BLOCK_K": 128, "BLOCK_V": 128, "num_warps": 4},
                  {"BLOCK_K": 128, "BLOCK_V": 128, "num_warps": 8}],
    key=["HV", "DK", "DV"],
)
@triton.jit
def _chunk_wu_kernel(
    k, v, chunks, tk_ws, tv_ws, w_ws, u_ws, n_chunks,
    stride_k_t, stride_k_h, stride_v_t, stride_v_h,
    HK: tl.constexpr, HV: tl.constexpr, DK: tl.constexpr, DV: tl.constexpr,
    BT: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_V: tl.constexpr, DOT_PRECISION: tl.constexpr,
    UPCAST_DOTS: tl.constexpr,
):
    """w = (Tinv diag(beta Gam / |k|)) k and u = (Tinv diag(beta)) v per (chunk, value head), over Dk and Dv blocks."""
    DOT: tl.constexpr = k.dtype.element_ty
    rows = tl.arange(0, BT)
    for item in tl.range(tl.program_id(0), n_chunks * HV, tl.num_programs(0)):
        chunk = item // HV
        head = item % HV
        k_base = k + (head // (HV // HK)) * stride_k_h
        v_base = v + head * stride_v_h
        start = tl.load(chunks + 2 * chunk).to(tl.int64)
        row_ok = rows < tl.load(chunks + 2 * chunk + 1) - tl.load(chunks + 2 * chunk)
        tok = start + rows
        ws_row = tok * HV + head
        # Blocks above the diagonal were not written (Tinv is lower triangular): masked to 0.
        lower = row_ok[:, None] & (rows[None, :] <= rows[:, None])
        t_k = tl.load(tk_ws + ws_row[:, None] * BT + rows[None, :], mask=lower, other=0.0)
        for k0 in tl.static_range(0, DK, BLOCK_K):
            cols = k0 + tl.arange(0, BLOCK_K)
            k_blk = _load_rows(k_base, tok, row_ok, stride_k_t, cols, DK)
            _store_rows(w_ws, ws_row, row_ok, cols, DK, dot_f32_acc(t_k, k_blk, DOT, DOT_PRECISION, UPCAST_DOTS))
        t_v = tl.load(tv_ws + ws_row[:, None] * BT + rows[None, :], mask=lower, other=0.0)
        for v0 in tl.static_range(0, DV, BLOCK_V):
            cols = v0 + tl.arange(0, BLOCK_V)
            v_blk = _load_rows(v_base, tok, row_ok, stride_v_t, cols, DV)
            _store_rows(u_ws, ws_row, row_ok, cols, DV, dot_f32_acc(t_v, v_blk, DOT, DOT_PRECISION, UPCAST_DOTS))


def _state_fixed(*, dk: int) -> dict:
    # 32 value columns keep S and the Dk-wide tiles within the UB for Dk <= 128;
    # Dk = 256 doubles those tiles, so S narrows to 16 columns (module doc).
    return {"BLOCK_V": 32 if dk <= 128 else 16}


@configured(
    fixed=_state_fixed,
    # S [Dk, BLOCK_V] float32 plus its rounded copy stay in registers: BLOCK_V = 64 needs 8 warps to fit
    # (4 warps sit at the 255-register limit); 16 gives more programs to a single long sequence.
    cuda_configs=[{"BLOCK_V": 16, "num_warps": 4}, {"BLOCK_V": 32, "num_warps": 4}, {"BLOCK_V": 32, "num_warps": 8},
                  {"BLOCK_V": 64, "num_warps": 8}],
    key=["HV", "DK", "DV"],
    restore_value=["state_in"],
)
@triton.jit
def _chunk_state_kernel(
    q, k, o, chunks, seq_chunks, chunk_decay_ws, q_gain_ws, k_gain_ws, aqk_ws, w_ws, u_ws, state_in, final,
    read_rows, write_rows, checkpoint_rows, checkpoints,
    n_seqs,
    stride_q_t, stride_q_h, stride_k_t, stride_k_h,
    HK: tl.constexpr, HV: tl.constexpr, DK: tl.constexpr, DV: tl.constexpr,
    BT: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_V: tl.constexpr,
    POOL: tl.constexpr, STORE_FINAL: tl.constexpr, DOT_PRECISION: tl.constexpr, UPCAST_DOTS: tl.constexpr,
    CHECKPOINTS: tl.constexpr,
):
    DOT: tl.constexpr = q.dtype.element_ty
    n_vblocks: tl.constexpr = (DV + BLOCK_V - 1) // BLOCK_V
    rows = tl.arange(0, BT)
    dk = tl.arange(0, BLOCK_K)
    k_ok = dk < DK
    for item in tl.range(tl.program_id(0), n_seqs * HV * n_vblocks, tl.num_programs(0)):
        seq = item // (HV * n_vblocks)
        head = (item // n_vblocks) % HV
        q_base = q + (head // (HV // HK)) * stride_q_h
        k_base = k + (head // (HV // HK)) * stride_k_h
        dv = (item % n_vblocks) * BLOCK_V + tl.arange(0, BLOCK_V)
        v_ok = dv < DV
        tile_ok = k_ok[:, None] & v_ok[None, :]
        in_row = head * (DK * DV) + dk[:, None] * DV + dv[None, :]
        write_row = tl.load(write_rows + seq).to(tl.int64)
        if write_row >= 0:  # a pool row of -1 is padding: skip the sequence
            read_row = tl.load(read_rows + seq).to(tl.int64)
            state = tl.load(state_in + read_row * (HV * DK * DV) + in_row, mask=and_flag(tile_ok, read_row >= 0),
                            other=0.0)
            for chunk in tl.range(tl.load(seq_chunks + seq), tl.load(seq_chunks + seq + 1)):
                start = tl.load(chunks + 2 * chunk).to(tl.int64)
                length = tl.load(chunks + 2 * chunk + 1) - tl.load(chunks + 2 * chunk)
                row_ok = rows < length
                tok = start + rows
                ws_row = tok * HV + head
                state_dot = state.to(DOT)  # S as a dot operand, rounded once per chunk
                # v_new = u - w S: the values corrected by what the state already predicts.
                w_t = _load_rows(w_ws, ws_row, row_ok, DK, dk, DK)
                u_t = _load_rows(u_ws, ws_row, row_ok, DV, dv, DV)
                v_new = u_t - dot_f32_acc(w_t, state_dot, DOT, DOT_PRECISION, UPCAST_DOTS)
                # Outputs: the decayed state read by q (its factor scale Gam / |q| after the dot),
                # plus the in-chunk attention.
                q_t = _load_rows(q_base, tok, row_ok, stride_q_t, dk, DK)
                q_gain = tl.load(q_gain_ws + ws_row, mask=row_ok, other=0.0)
                aqk = _load_rows(aqk_ws, ws_row, row_ok, BT, rows, BT)
                o_t = (q_gain[:, None] * dot_f32_acc(q_t, state_dot, DOT, DOT_PRECISION, UPCAST_DOTS)
                       + dot_f32_acc(aqk, v_new, DOT, DOT_PRECISION, UPCAST_DOTS))
                _store_rows(o, ws_row, row_ok, dv, DV, o_t)
                # Next state: decay to the chunk end, add the chunk's corrected writes
                # (k's factor exp(G_L - G) / |k| applied to v_new's rows).
                k_t = _load_rows(k_base, tok, row_ok, stride_k_t, dk, DK)
                k_gain = tl.load(k_gain_ws + ws_row, mask=row_ok, other=0.0)
                state = (state * tl.load(chunk_decay_ws + chunk * HV + head)
                         + dot_f32_acc(tl.trans(k_t), v_new * k_gain[:, None], DOT, DOT_PRECISION, UPCAST_DOTS))
                if CHECKPOINTS:  # the state at this chunk's end, where a prefix cache asked for it
                    checkpoint_row = tl.load(checkpoint_rows + chunk).to(tl.int64)
                    if checkpoint_row >= 0:
                        tl.store(checkpoints + checkpoint_row * (HV * DK * DV) + in_row, state, mask=tile_ok)
            if POOL:
                tl.store(state_in + write_row * (HV * DK * DV) + in_row, state, mask=tile_ok)
            if STORE_FINAL:
                tl.store(final + tl.cast(seq, tl.int64) * (HV * DK * DV) + in_row, state, mask=tile_ok)


def chunk_gated_delta_rule(*, q, k, v, g, beta, scale, initial_state, output_final_state, cu_seqlens,
                           ssm_state_indices, has_initial_state, use_qk_l2norm_in_kernel, chunk_indices=None,
                           chunk_offsets=None, checkpoint_boundaries=None):
    """Triton ``chunk_gated_delta_rule``; arguments as validated by ``ops/gdn/op.py``.

    q, k [B, T, Hk, Dk]; v [B, T, Hv, Dv]; g float32 and beta [B, T, Hv];
    states float32 [N, Hv, Dk, Dv] or a pool [S, Hv, Dk, Dv] (updated in place
    at ``ssm_state_indices``). Returns (o [B, T, Hv, Dv] in v's dtype,
    final states float32 [N, Hv, Dk, Dv] or None). ``chunk_indices``/``chunk_offsets``:
    the step's ``prepare_chunk_indices`` (built here when not given, a host read on a device).
    ``checkpoint_boundaries`` [P, 2] (sequence r, j): the state kernel also stores the state at the
    end of sequence r's chunk j - 1 (after 64 * j tokens), returned third, float32 [P, Hv, Dk, Dv].
    """
    hk, dk = q.shape[2], q.shape[3]
    hv, dv = v.shape[2], v.shape[3]
    rows, plan, o = prepare_launch(q, k, v, g, beta, cu_seqlens=cu_seqlens, initial_state=initial_state,
                                   ssm_state_indices=ssm_state_indices, has_initial_state=has_initial_state,
                                   output_final_state=output_final_state)
    n = rows.n_seqs
    checkpoints = None
    if checkpoint_boundaries is not None:
        checkpoints = torch.zeros((checkpoint_boundaries.shape[0], hv, dk, dv), dtype=torch.float32, device=q.device)
    if n == 0 or hv == 0:
        return (o.view(v.shape), plan.final) + ((checkpoints,) if checkpoints is not None else ())
    if chunk_indices is None:
        chunk_indices, chunk_offsets = prepare_chunk_indices(rows.cu)
    checkpoint_rows = chunk_offsets  # any int32 tensor: not read without CHECKPOINTS
    if checkpoints is not None and checkpoints.shape[0] > 0:
        # The global chunk whose end is each requested boundary -> its row in `checkpoints`.
        boundaries = checkpoint_boundaries.to(torch.int64)
        ends = chunk_offsets.to(torch.int64)[boundaries[:, 0]] + boundaries[:, 1] - 1
        checkpoint_rows = torch.full((chunk_indices.shape[0],), -1, dtype=torch.int32, device=q.device)
        checkpoint_rows[ends] = torch.arange(boundaries.shape[0], dtype=torch.int32, device=q.device)
    chunks, seq_chunks, n_chunks = chunk_indices, chunk_offsets, chunk_indices.shape[0]
    total = rows.v.shape[0]
    f32 = dict(dtype=torch.float32, device=q.device)
    # w and Aqk are only ever dot operands: stored in the dot dtype (q's), rounded once.
    dot_dtype = dict(dtype=q.dtype, device=q.device)
    chunk_decay_ws = torch.empty((n_chunks, hv), **f32)
    q_gain_ws = torch.empty((total, hv), **f32)
    k_gain_ws = torch.empty((total, hv), **f32)
    aqk_ws = torch.empty((total, hv, CHUNK), **dot_dtype)
    a_ws = torch.empty((total, hv, CHUNK), **f32)
    w_gain_ws = torch.empty((total, hv), **f32)
    tk_ws = torch.empty((total, hv, CHUNK), **dot_dtype)
    tv_ws = torch.empty((total, hv, CHUNK), **dot_dtype)
    w_ws = torch.empty((total, hv, dk), **dot_dtype)
    u_ws = torch.empty((total, hv, dv), **f32)
    workspaces = (chunk_decay_ws, q_gain_ws, k_gain_ws, aqk_ws, w_ws, u_ws)
    qk_strides = (rows.q.stride(0), rows.q.stride(1), rows.k.stride(0), rows.k.stride(1))
    v_strides = (rows.v.stride(0), rows.v.stride(1))
    heads = dict(HK=hk, HV=hv, DK=dk, BT=CHUNK)
    # The dots of q, k, v and the model-dtype workspaces, and the inverse's float32 dots (module doc).
    kind = target(q.device)
    dots, inverse_dots = dot_precision(kind, q.dtype), float32_dot_precision(kind, q.dtype)
    # The interpreter multiplies the rounded 16-bit operands as float32 (dot_f32_acc): its bfloat16 tl.dot is wrong.
    dots_in = dict(DOT_PRECISION=dots, UPCAST_DOTS=kind == "interpreter")
    if n_chunks > 0:
        _chunk_prep_kernel.launch(
            q.device, n_chunks * hv,
            rows.q, rows.k, rows.g, rows.beta, chunks, chunk_decay_ws, q_gain_ws, k_gain_ws, aqk_ws, a_ws, w_gain_ws,
            float(scale), n_chunks, *qk_strides, rows.g.stride(0), rows.beta.stride(0),
            L2NORM=bool(use_qk_l2norm_in_kernel), EPS=L2NORM_EPS, **dots_in, **heads,
        )
        _chunk_solve_kernel.launch(q.device, n_chunks * hv, rows.beta, chunks, a_ws, w_gain_ws, tk_ws, tv_ws,
                                   n_chunks, rows.beta.stride(0), HV=hv, BT=CHUNK, DOT_PRECISION=inverse_dots)
        _chunk_wu_kernel.launch(
            q.device, n_chunks * hv,
            rows.k, rows.v, chunks, tk_ws, tv_ws, w_ws, u_ws, n_chunks, *qk_strides[2:], *v_strides, DV=dv,
            **dots_in, **heads,
        )
    _chunk_state_kernel.launch(
        q.device, n * hv * triton.cdiv(dv, 16),
        rows.q, rows.k, o, chunks, seq_chunks, *workspaces, plan.state_in, plan.final_arg,
        plan.read_rows, plan.write_rows, checkpoint_rows, checkpoints if checkpoints is not None else plan.state_in,
        n, *qk_strides, shape={"dk": dk},
        BLOCK_K=tile(dk), POOL=plan.pool, STORE_FINAL=plan.final is not None, DV=dv, **dots_in, **heads,
        CHECKPOINTS=checkpoints is not None and checkpoints.shape[0] > 0,
    )
    return (o.view(v.shape), plan.final) + ((checkpoints,) if checkpoints is not None else ())
