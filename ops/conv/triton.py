"""Triton kernels for the depthwise causal convolution of the GDN layers.

Semantics in ``ops/conv/op.py``: output ``act(sum_k window[k] * weight[:, k] + bias)``
where the window of a token is the K inputs ending at it, the inputs before a
sequence's start being its saved state (the previous K-1 inputs, oldest first)
or zeros; afterwards each sequence's last K-1 inputs are saved. Everything is
computed in float32; outputs are stored in x's dtype and states in the pool's.

Both kernels update ``conv_states`` in place and also read it. Different
threads of one program may touch the same state row (the shifted read of
row ``j + n`` and the write of row ``j``), so a ``tl.debug_barrier()``
separates every read of the pool from the writes of that program. Two
programs never share a row: pool indices are validated to be unique.

Ascend UB, bytes per buffer (float32 compute tiles; inputs are at most as wide):
* ``causal_conv1d_fn``: one [BLOCK_T, BLOCK_C] input tile plus the float32
  accumulator and the output tile: 3 * BLOCK_T * BLOCK_C * 4 = 3 * 32 * 128 * 4
  = 48 KiB with the fixed config, inside the 96 KiB of a double-buffered UB.
* ``causal_conv1d_update``: the [BLOCK_K, BLOCK_C] state and weight tiles plus
  x and the output: (2 * 4 + 2) * 256 * 4 = 10 KiB for K = 4 (BLOCK_K = 4).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from .._triton import and_flag, configured


@triton.jit
def _activate(acc, SILU: tl.constexpr):
    if SILU:
        acc = acc / (1.0 + tl.exp(-acc))
    return acc


def _fn_fixed(**_shape) -> dict:
    # 32 tokens x 128 channels: 48 KiB of UB (module doc); several token tiles
    # per sequence in the tests, so the in-sequence loop is exercised.
    return {"BLOCK_T": 32, "BLOCK_C": 128}


@configured(
    fixed=_fn_fixed,
    # Not 64 x 256 with 4 warps: 128 float32 accumulators per thread spill 1.6-9.9 KB on sm_90
    # (bench/toolchains/sm90_check.py --all); the same tile with 8 warps spills under 300 bytes.
    cuda_configs=[{"BLOCK_T": bt, "BLOCK_C": bc, "num_warps": w}
                  for bt in (32, 64) for bc in (64, 128, 256) for w in (4, 8) if (bt, bc, w) != (64, 256, 4)],
    key=["C", "KW"],
    restore_value=["conv_states"],
)
@triton.jit
def _causal_conv1d_fn_kernel(
    x, weight, bias, conv_states, query_start_loc, cache_indices, has_initial_state, out,
    C, n_seqs, stride_x_t, stride_w_c, stride_w_k,
    KW: tl.constexpr, HAS_BIAS: tl.constexpr, SILU: tl.constexpr,
    BLOCK_T: tl.constexpr, BLOCK_C: tl.constexpr, BLOCK_K: tl.constexpr,
):
    n_cblocks = tl.cdiv(C, BLOCK_C)
    state_rows: tl.constexpr = KW - 1
    for item in tl.range(tl.program_id(0), n_seqs * n_cblocks, tl.num_programs(0)):
        seq = item // n_cblocks
        chans = (item % n_cblocks) * BLOCK_C + tl.arange(0, BLOCK_C)
        chan_ok = chans < C
        bos = tl.load(query_start_loc + seq).to(tl.int64)
        length = (tl.load(query_start_loc + seq + 1).to(tl.int64) - bos).to(tl.int32)
        slot = tl.load(cache_indices + seq).to(tl.int64)
        use_state = (tl.load(has_initial_state + seq) != 0) & (slot >= 0)
        state = conv_states + slot * (state_rows * C)  # only dereferenced where slot >= 0
        x_seq = x + bos * stride_x_t
        if HAS_BIAS:
            bias_v = tl.load(bias + chans, mask=chan_ok, other=0.0).to(tl.float32)
        else:
            bias_v = tl.zeros([BLOCK_C], dtype=tl.float32)
        for t0 in tl.range(0, length, BLOCK_T):
            rows = t0 + tl.arange(0, BLOCK_T)
            row_ok = (rows < length)[:, None] & chan_ok[None, :]
            acc = tl.zeros([BLOCK_T, BLOCK_C], dtype=tl.float32) + bias_v[None, :]
            for k in tl.static_range(KW):
                w_k = tl.load(weight + chans * stride_w_c + k * stride_w_k, mask=chan_ok, other=0.0)
                pos = rows - (KW - 1) + k  # position in the sequence of window entry k
                from_x = tl.load(x_seq + pos[:, None] * stride_x_t + chans[None, :],
                                 mask=row_ok & (pos >= 0)[:, None], other=0.0)
                from_state = tl.load(state + (state_rows + pos)[:, None] * C + chans[None, :],
                                     mask=and_flag(row_ok & (pos < 0)[:, None], use_state), other=0.0)
                acc += (from_x.to(tl.float32) + from_state.to(tl.float32)) * w_k.to(tl.float32)[None, :]
            y = _activate(acc, SILU)
            tl.store(out + (bos + rows)[:, None] * C + chans[None, :], y.to(out.dtype.element_ty), mask=row_ok)
        # The new state: the last K-1 inputs, reaching into the old state when
        # the sequence is shorter than K-1.
        j = tl.arange(0, BLOCK_K)
        pos = length - state_rows + j
        keep = (j < state_rows)[:, None] & chan_ok[None, :]
        new_x = tl.load(x_seq + pos[:, None] * stride_x_t + chans[None, :], mask=keep & (pos >= 0)[:, None], other=0.0)
        new_old = tl.load(state + (state_rows + pos)[:, None] * C + chans[None, :],
                          mask=and_flag(keep & (pos < 0)[:, None], use_state), other=0.0)
        new_state = new_x.to(conv_states.dtype.element_ty) + new_old.to(conv_states.dtype.element_ty)
        tl.debug_barrier()  # every read of this program's state row happens before it is overwritten
        tl.store(state + j[:, None] * C + chans[None, :], new_state, mask=and_flag(keep, slot >= 0))


def _update_fixed(**_shape) -> dict:
    return {"BLOCK_C": 256}


@triton.jit
def update_step(read_state, write_state, x_t, weight, bias, chans, chan_ok, valid, C, stride_w_c, stride_w_k,
                 KW: tl.constexpr, HAS_BIAS: tl.constexpr, SILU: tl.constexpr, BLOCK_K: tl.constexpr):
    """One token: returns ``act(sum_j old[j] w[j] + x_t w[K-1] + bias)`` (zero where not ``valid``) and
    writes the window shifted by one, ``[old[1:], x_t]``, to ``write_state`` (which may be ``read_state``)."""
    state_rows: tl.constexpr = KW - 1
    j = tl.arange(0, BLOCK_K)
    tile_ok = (j < state_rows)[:, None] & chan_ok[None, :]
    old = tl.load(read_state + j[:, None] * C + chans[None, :], mask=and_flag(tile_ok, valid), other=0.0)
    w_old = tl.load(weight + chans[None, :] * stride_w_c + j[:, None] * stride_w_k, mask=tile_ok, other=0.0)
    w_new = tl.load(weight + chans * stride_w_c + state_rows * stride_w_k, mask=chan_ok, other=0.0)
    acc = tl.sum(old.to(tl.float32) * w_old.to(tl.float32), axis=0) + x_t.to(tl.float32) * w_new.to(tl.float32)
    if HAS_BIAS:
        acc += tl.load(bias + chans, mask=chan_ok, other=0.0).to(tl.float32)
    y = tl.where(valid, _activate(acc, SILU), 0.0)
    # Shift the window by one: row j takes old row j + 1, the last row takes x.
    shifted = tl.load(read_state + (j + 1)[:, None] * C + chans[None, :],
                      mask=and_flag(tile_ok & (j + 1 < state_rows)[:, None], valid), other=0.0)
    new_state = tl.where((j == state_rows - 1)[:, None], x_t.to(write_state.dtype.element_ty)[None, :], shifted)
    tl.debug_barrier()  # the shifted reads of this row complete before it is overwritten
    tl.store(write_state + j[:, None] * C + chans[None, :], new_state, mask=and_flag(tile_ok, valid))
    tl.debug_barrier()  # and the write completes before the next token of the program reads it back
    return y


@configured(
    fixed=_update_fixed,
    cuda_configs=[{"BLOCK_C": bc, "num_warps": w} for bc in (128, 256, 512) for w in (2, 4)],
    key=["C", "KW"],
    restore_value=["conv_states"],
)
@triton.jit
def _causal_conv1d_update_kernel(
    x, weight, bias, conv_states, cache_indices, out,
    C, batch, stride_x_b, stride_w_c, stride_w_k,
    KW: tl.constexpr, HAS_BIAS: tl.constexpr, SILU: tl.constexpr,
    BLOCK_C: tl.constexpr, BLOCK_K: tl.constexpr,
):
    n_cblocks = tl.cdiv(C, BLOCK_C)
    state_rows: tl.constexpr = KW - 1
    for item in tl.range(tl.program_id(0), batch * n_cblocks, tl.num_programs(0)):
        b = item // n_cblocks
        chans = (item % n_cblocks) * BLOCK_C + tl.arange(0, BLOCK_C)
        chan_ok = chans < C
        slot = tl.load(cache_indices + b).to(tl.int64)
        state = conv_states + slot * (state_rows * C)
        x_b = tl.load(x + tl.cast(b, tl.int64) * stride_x_b + chans, mask=chan_ok, other=0.0)
        y = update_step(state, state, x_b, weight, bias, chans, chan_ok, slot >= 0, C, stride_w_c, stride_w_k,
                         KW, HAS_BIAS, SILU, BLOCK_K)
        tl.store(out + tl.cast(b, tl.int64) * C + chans, y.to(out.dtype.element_ty), mask=chan_ok)


@configured(
    fixed=_update_fixed,
    cuda_configs=[{"BLOCK_C": bc, "num_warps": w} for bc in (128, 256, 512) for w in (2, 4)],
    key=["C", "KW"],
    restore_value=["conv_states"],
)
@triton.jit
def _causal_conv1d_update_spec_decode_kernel(
    x, weight, bias, conv_states, query_start_loc, token_rows, num_accepted, out,
    C, n_seqs, width, stride_x_t, stride_w_c, stride_w_k,
    KW: tl.constexpr, HAS_BIAS: tl.constexpr, SILU: tl.constexpr,
    BLOCK_C: tl.constexpr, BLOCK_K: tl.constexpr,
):
    """Speculative decoding: token t of a sequence reads the window the previous token wrote (the first token
    the row of column num_accepted - 1) and writes its own to its column's row: a chain inside one program."""
    n_cblocks = tl.cdiv(C, BLOCK_C)
    state_rows: tl.constexpr = KW - 1
    for item in tl.range(tl.program_id(0), n_seqs * n_cblocks, tl.num_programs(0)):
        seq = item // n_cblocks
        chans = (item % n_cblocks) * BLOCK_C + tl.arange(0, BLOCK_C)
        chan_ok = chans < C
        rows = token_rows + tl.cast(seq, tl.int64) * width
        # Validated: a real sequence reads a valid row; a padding row is all -1.
        previous = tl.load(rows + tl.load(num_accepted + seq).to(tl.int64) - 1).to(tl.int64)
        valid = previous >= 0
        bos = tl.load(query_start_loc + seq).to(tl.int64)
        eos = tl.load(query_start_loc + seq + 1).to(tl.int64)
        for t in tl.range(bos, eos):
            row = tl.load(rows + (t - bos)).to(tl.int64)
            x_t = tl.load(x + t * stride_x_t + chans, mask=chan_ok, other=0.0)
            y = update_step(conv_states + previous * (state_rows * C), conv_states + row * (state_rows * C), x_t,
                             weight, bias, chans, chan_ok, valid, C, stride_w_c, stride_w_k, KW, HAS_BIAS, SILU,
                             BLOCK_K)
            tl.store(out + t * C + chans, y.to(out.dtype.element_ty), mask=chan_ok)
            previous = row


def _common(weight, bias):
    kw = weight.shape[1]
    flags = dict(KW=kw, HAS_BIAS=bias is not None, BLOCK_K=triton.next_power_of_2(max(kw - 1, 1)))
    # A dummy pointer stands in for an absent bias; HAS_BIAS keeps it unread.
    return (bias if bias is not None else weight), flags


def causal_conv1d_fn(*, x, weight, bias, conv_states, query_start_loc, cache_indices, has_initial_state, activation):
    """Triton ``causal_conv1d_fn``; arguments as validated by ``ops/conv/op.py``.

    x: [T, C] (channels contiguous); weight: [C, K]; bias: [C] or None;
    conv_states: contiguous [S, K-1, C] pool, updated in place;
    query_start_loc: [N+1]; cache_indices: [N] (-1 padding); has_initial_state: [N] bool.
    Returns [T, C] in x's dtype.
    """
    t, c = x.shape
    if x.stride(1) != 1:
        x = x.contiguous()
    out = torch.empty((t, c), dtype=x.dtype, device=x.device)
    n = cache_indices.shape[0]
    if n == 0:
        return out
    bias_arg, flags = _common(weight, bias)
    # Items: (sequence, channel block), counted with the smallest BLOCK_C of any config.
    _causal_conv1d_fn_kernel.launch(
        x.device, n * triton.cdiv(c, 64),
        x, weight, bias_arg, conv_states, query_start_loc, cache_indices, has_initial_state.view(torch.int8), out,
        c, n, x.stride(0), weight.stride(0), weight.stride(1),
        SILU=activation == "silu", **flags,
    )
    return out


def causal_conv1d_update(*, x, conv_states, weight, bias, cache_indices, activation, query_start_loc=None,
                         num_accepted_tokens=None):
    """Triton ``causal_conv1d_update``; arguments as validated by ``ops/conv/op.py``.

    x: [B, C]; conv_states: contiguous [S, K-1, C] pool, shifted in place;
    weight: [C, K]; bias: [C] or None; cache_indices: [B] (-1: output zeros,
    no write). Returns [B, C] in x's dtype. With ``num_accepted_tokens`` [N]:
    x [T, C] packed by query_start_loc [N+1], cache_indices [N, W], one state
    row per token (the op's docstring).
    """
    bsz, c = x.shape
    if x.stride(1) != 1:
        x = x.contiguous()
    out = torch.empty((bsz, c), dtype=x.dtype, device=x.device)
    if num_accepted_tokens is not None:
        return _update_spec_decode(x, conv_states, weight, bias, cache_indices, activation, query_start_loc,
                                   num_accepted_tokens, out)
    if bsz == 0:
        return out
    bias_arg, flags = _common(weight, bias)
    _causal_conv1d_update_kernel.launch(
        x.device, bsz * triton.cdiv(c, 128),
        x, weight, bias_arg, conv_states, cache_indices, out,
        c, bsz, x.stride(0), weight.stride(0), weight.stride(1),
        SILU=activation == "silu", **flags,
    )
    return out


def _update_spec_decode(x, conv_states, weight, bias, token_rows, activation, query_start_loc, num_accepted_tokens,
                        out):
    n, c = token_rows.shape[0], x.shape[1]
    if n == 0:
        return out
    bias_arg, flags = _common(weight, bias)
    _causal_conv1d_update_spec_decode_kernel.launch(
        x.device, n * triton.cdiv(c, 128),
        x, weight, bias_arg, conv_states, query_start_loc, token_rows, num_accepted_tokens, out,
        c, n, token_rows.shape[1], x.stride(0), weight.stride(0), weight.stride(1),
        SILU=activation == "silu", **flags,
    )
    return out
