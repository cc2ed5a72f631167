"""Triton kernels for ``fused_experts``: two grouped GEMMs over the experts' pair ranges.

Layout (host, torch ops, no host read): the P = T*K (token, slot) pairs are
sorted by expert once (``grouping.sort_by_expert``), and each expert's range
is cut into blocks of ``BLOCK_M`` pairs. Block b belongs to one expert and
covers sorted positions ``[block_start[b], block_end[b])``; the number of
blocks is bounded from the shapes alone (``cdiv(P, BLOCK_M) + min(E, P)``),
and blocks past the last expert's are empty (``start == end``) and skipped.

Kernel 1 (gate/up): work item = (block, tile of ``BLOCK_N`` intermediate
columns). It gathers the block's token rows of x, multiplies them by the
expert's gate and up rows of ``w13`` over H in ``BLOCK_K`` steps (float32
accumulators), and stores ``silu(gate) * up`` in x's dtype at the pairs' rows
of an [P, I] buffer. Kernel 2 (down): work item = (block, tile of
``BLOCK_N`` hidden columns): the block's rows of that buffer times the
expert's ``w2`` over I, scaled by the pairs' routing weights, stored in float32
at the pairs' rows of [P, H]. The host then sums the K slots of each token in
float32 (deterministic: no atomics) and rounds to x's dtype.

Every weight tile is read once per block: an expert's weights are read
ceil(pairs / BLOCK_M) times, and never for an expert with no pair.

Every dot passes ``DOT_PRECISION``, the host's ``_triton.dot_precision`` for
x's dtype (IEEE for float32 inputs: CUDA's TF32 would miss the float32 tolerance). Ascend UB, bytes per buffer of
kernel 1 with the fixed config (16 x 32 x 32): x tile 16*32 + two weight tiles
2*32*32 elements, plus two float32 16x32 accumulators: 2560 * 2 + 4096 bytes =
9 KiB in bfloat16, far below the 96 KiB of a double-buffered 192 KiB UB.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from .._triton import configured, dot_precision, target
from .grouping import sort_by_expert

# The smallest tl.dot dimension; also the block size of the fixed config.
BLOCK_M_FIXED = 16


def _fixed(**_shape) -> dict:
    return {"BLOCK_N": 32, "BLOCK_K": 32}


CUDA_CONFIGS = [{"BLOCK_N": n, "BLOCK_K": k, "num_warps": w} for n in (32, 64, 128) for k in (32, 64) for w in (4,)]


@configured(fixed=_fixed, cuda_configs=CUDA_CONFIGS, key=["H", "I", "BLOCK_M"])
@triton.jit
def _gate_up_kernel(
    x, w13, pairs, block_start, block_end, block_expert, act,
    n_blocks, H, I, K_SLOTS,
    stride_xt, stride_xh, stride_we, stride_wn, stride_wh,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, DOT_PRECISION: tl.constexpr,
):
    n_tiles = tl.cdiv(I, BLOCK_N)
    n_items = n_blocks * n_tiles
    for item in tl.range(tl.program_id(0), n_items, tl.num_programs(0)):
        blk = item // n_tiles
        n0 = (item % n_tiles) * BLOCK_N
        start = tl.load(block_start + blk)
        end = tl.load(block_end + blk)
        if end > start:
            expert = tl.load(block_expert + blk).to(tl.int64)
            rows = start + tl.arange(0, BLOCK_M)
            row_ok = rows < end
            pair = tl.load(pairs + rows, mask=row_ok, other=0)
            token = pair // K_SLOTS
            cols = n0 + tl.arange(0, BLOCK_N)
            col_ok = cols < I
            acc_gate = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
            acc_up = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
            w_base = w13 + expert * stride_we
            for k0 in range(0, H, BLOCK_K):
                ks = k0 + tl.arange(0, BLOCK_K)
                k_ok = ks < H
                a = tl.load(x + token[:, None] * stride_xt + ks[None, :] * stride_xh,
                            mask=row_ok[:, None] & k_ok[None, :], other=0.0)
                w_ok = k_ok[:, None] & col_ok[None, :]
                # [BLOCK_K, BLOCK_N] tiles of the transposed gate and up rows.
                wg = tl.load(w_base + cols[None, :] * stride_wn + ks[:, None] * stride_wh, mask=w_ok, other=0.0)
                wu = tl.load(w_base + (cols[None, :] + I) * stride_wn + ks[:, None] * stride_wh, mask=w_ok,
                             other=0.0)
                acc_gate = tl.dot(a, wg, acc_gate, input_precision=DOT_PRECISION)
                acc_up = tl.dot(a, wu, acc_up, input_precision=DOT_PRECISION)
            silu = acc_gate / (1.0 + tl.exp(-acc_gate))
            out = silu * acc_up
            tl.store(act + pair[:, None] * I + cols[None, :], out.to(act.dtype.element_ty),
                     mask=row_ok[:, None] & col_ok[None, :])


@configured(fixed=_fixed, cuda_configs=CUDA_CONFIGS, key=["H", "I", "BLOCK_M"])
@triton.jit
def _down_kernel(
    act, w2, pairs, block_start, block_end, block_expert, topk_weights, y,
    n_blocks, H, I,
    stride_we, stride_wh, stride_wi,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, DOT_PRECISION: tl.constexpr,
):
    n_tiles = tl.cdiv(H, BLOCK_N)
    n_items = n_blocks * n_tiles
    for item in tl.range(tl.program_id(0), n_items, tl.num_programs(0)):
        blk = item // n_tiles
        n0 = (item % n_tiles) * BLOCK_N
        start = tl.load(block_start + blk)
        end = tl.load(block_end + blk)
        if end > start:
            expert = tl.load(block_expert + blk).to(tl.int64)
            rows = start + tl.arange(0, BLOCK_M)
            row_ok = rows < end
            pair = tl.load(pairs + rows, mask=row_ok, other=0)
            cols = n0 + tl.arange(0, BLOCK_N)
            col_ok = cols < H
            acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
            w_base = w2 + expert * stride_we
            for k0 in range(0, I, BLOCK_K):
                ks = k0 + tl.arange(0, BLOCK_K)
                k_ok = ks < I
                a = tl.load(act + pair[:, None] * I + ks[None, :], mask=row_ok[:, None] & k_ok[None, :], other=0.0)
                w = tl.load(w_base + cols[None, :] * stride_wh + ks[:, None] * stride_wi,
                            mask=k_ok[:, None] & col_ok[None, :], other=0.0)
                acc = tl.dot(a, w, acc, input_precision=DOT_PRECISION)
            weight = tl.load(topk_weights + pair, mask=row_ok, other=0.0).to(tl.float32)
            tl.store(y + pair[:, None] * H + cols[None, :], acc * weight[:, None],
                     mask=row_ok[:, None] & col_ok[None, :])


def expert_blocks(topk_ids: torch.Tensor, num_experts: int, block_m: int):
    """The block layout of the module doc: ``(pairs, block_start, block_end, block_expert)``.

    pairs: [P] int64 sorted by expert; the others [NB] int64 with
    ``NB = cdiv(P, block_m) + min(E, P)`` (a bound known from the shapes, so no
    host read); empty blocks have ``start == end == 0`` and expert 0.
    """
    pairs, offsets = sort_by_expert(topk_ids, num_experts)
    n_pairs = pairs.numel()
    counts = offsets[1:] - offsets[:-1]
    blocks_per_expert = (counts + block_m - 1) // block_m
    first_block = torch.zeros(num_experts + 1, dtype=torch.int64, device=pairs.device)
    first_block[1:] = torch.cumsum(blocks_per_expert, 0)
    n_blocks = triton.cdiv(n_pairs, block_m) + min(num_experts, n_pairs)
    b = torch.arange(n_blocks, dtype=torch.int64, device=pairs.device)
    expert = torch.searchsorted(first_block[1:], b, right=True)  # E for blocks past the last expert's
    used = expert < num_experts
    expert = expert.clamp(max=num_experts - 1)
    start = offsets[expert] + (b - first_block[expert]) * block_m
    end = torch.minimum(start + block_m, offsets[expert + 1])
    zero = torch.zeros_like(start)
    return pairs, torch.where(used, start, zero), torch.where(used, end, zero), torch.where(used, expert, zero)


def fused_experts(*, hidden_states, w13, w2, topk_weights, topk_ids):
    """Triton ``fused_experts`` (arguments validated by ``ops/moe/op.py``).

    hidden_states [T, H] (any strides); w13 [E, 2I, H], w2 [E, H, I] (any
    strides); topk_weights [T, K] float; topk_ids [T, K] int. Returns [T, H]
    in hidden_states' dtype.
    """
    x = hidden_states
    t, h = x.shape
    k = topk_ids.shape[1]
    num_experts, two_i, _ = w13.shape
    inter = two_i // 2
    if t == 0:
        return torch.empty((0, h), dtype=x.dtype, device=x.device)
    block_m = BLOCK_M_FIXED
    pairs, start, end, expert = expert_blocks(topk_ids.contiguous(), num_experts, block_m)
    n_pairs = pairs.numel()
    n_blocks = start.numel()
    precision = dot_precision(target(x.device), x.dtype)
    act = torch.empty((n_pairs, inter), dtype=x.dtype, device=x.device)
    # The kernels count their work items with their own BLOCK_N; the grid is
    # sized with the smallest BLOCK_N of any config (32), an upper bound.
    _gate_up_kernel.launch(
        x.device, n_blocks * triton.cdiv(inter, 32),
        x, w13, pairs, start, end, expert, act,
        n_blocks, h, inter, k,
        x.stride(0), x.stride(1), w13.stride(0), w13.stride(1), w13.stride(2),
        BLOCK_M=block_m, DOT_PRECISION=precision,
    )
    y = torch.empty((n_pairs, h), dtype=torch.float32, device=x.device)
    _down_kernel.launch(
        x.device, n_blocks * triton.cdiv(h, 32),
        act, w2, pairs, start, end, expert, topk_weights.contiguous().reshape(-1), y,
        n_blocks, h, inter,
        w2.stride(0), w2.stride(1), w2.stride(2),
        BLOCK_M=block_m, DOT_PRECISION=precision,
    )
    return y.view(t, k, h).sum(1).to(x.dtype)
