"""Triton kernel for ``reshape_and_cache``: scatter the step's keys and values into the paged cache.

Work item = (token t, block of ``BLOCK_H`` KV heads). The program loads the
token's slot, and when it is not padding (-1) copies the [BLOCK_H, D] rows of
``key`` and ``value`` to ``cache[slot // Bs, h, slot % Bs, :]``, quantizing
to INT8 on the way for int8 caches. Slots are unique (checked by the op), so
no two items write the same cache row and the items need no ordering.

INT8 stores ``clamp(round_half_to_even(x / scale), -128, 127)`` (a NaN
quotient as 0, +-inf clamped) exactly as the torch reference: the division is the IEEE one (``div_rn`` where Triton would
otherwise lower ``/`` to an approximate division) and the rounding is done by
``round_half_to_even`` below, since the Triton 3.2 API has no such builtin.

Ascend unified-buffer use per buffer (one work item): the key or value tile
[BLOCK_H, BLOCK_D] in its dtype, its float32 copy and quotient (int8 caches),
the matching float32 scale tile and the int8 result:
``BLOCK_H * BLOCK_D * (e + 4 + 4 + 4 + 1)`` bytes, at most
``BLOCK_H * BLOCK_D * 17`` = 68 KiB for the 4096-element tile the host allows
(``ascend_tile_bytes``), so two buffers fit the 192 KiB UB.
"""
from __future__ import annotations

import importlib.util

import torch
import triton
import triton.language as tl

from .._triton import ASCEND_UB_BYTES, configured, target

# Elements of one [BLOCK_H, BLOCK_D] tile: big enough to amortise the slot
# load, small enough for the Ascend UB (see module doc).
MAX_TILE_ELEMENTS = 4096

# Triton lowers float32 ``/`` to an approximate division on NVIDIA; the INT8
# rounding must see the exact quotient the torch reference sees. ``div_rn`` is
# the IEEE division there and under the interpreter; triton-ascend gets the
# portable ``/`` (its vector division is the IEEE one).
_ON_ASCEND = importlib.util.find_spec("torch_npu") is not None
if hasattr(tl.math, "div_rn") and not _ON_ASCEND:

    @triton.jit
    def exact_div(x, y):
        return tl.math.div_rn(x, y)

else:  # pragma: no cover - Ascend / very old Triton

    @triton.jit
    def exact_div(x, y):
        return x / y


@triton.jit
def round_half_to_even(y):
    """Round float32 ``y`` to the nearest integer, ties to even (like ``torch.round``).

    Exact for |y| < 2**22, where ``y - floor(y)`` is exact in float32 (callers
    clamp to the INT8 range first, so |y| <= 128).
    """
    low = tl.floor(y)
    frac = y - low
    half = low * 0.5
    low_is_odd = half != tl.floor(half)
    up = (frac > 0.5) | ((frac == 0.5) & low_is_odd)
    return tl.where(up, low + 1.0, low)


@triton.jit
def quantize_int8(x, scale):
    """``clamp(round_half_to_even(x / scale), -128, 127)`` as int8, NaN -> 0; x, scale same shape.

    Clamping before rounding gives the same result (the bounds are integers)
    and keeps the rounding in its exact range.
    """
    y = exact_div(x.to(tl.float32), scale)
    # NaN is stored as 0 (contract); tl.maximum/minimum leave NaN handling
    # unspecified by default, so it is replaced before the clamp. +-inf clamp.
    y = tl.where(y != y, 0.0, y)
    y = tl.minimum(tl.maximum(y, -128.0), 127.0)
    return round_half_to_even(y).to(tl.int8)


@triton.jit
def _copy_heads(src, dst, scale, src_offsets, dst_offsets, scale_offsets, mask, QUANT: tl.constexpr):
    """Copy one [BLOCK_H, BLOCK_D] tile from ``src`` to ``dst``, quantizing if ``QUANT``."""
    x = tl.load(src + src_offsets, mask=mask, other=0.0)
    if QUANT:
        s = tl.load(scale + scale_offsets, mask=mask, other=1.0)
        tl.store(dst + dst_offsets, quantize_int8(x, s), mask=mask)
    else:
        tl.store(dst + dst_offsets, x.to(dst.dtype.element_ty), mask=mask)


def _fixed_config(**_):
    # Interpreter and Ascend: the tile is chosen by ``tile_shape``; nothing else to pick.
    return {}


@configured(fixed=_fixed_config,
            cuda_configs=[{"num_warps": w, "num_stages": 1} for w in (1, 2, 4)],
            key=["BLOCK_H", "BLOCK_D", "QUANT"])
@triton.jit
def _reshape_and_cache_kernel(
    key, value, key_cache, value_cache, slot_mapping, k_scale, v_scale,
    n_items, head_blocks, num_heads, head_dim, block_size,
    stride_kt, stride_kh, stride_vt, stride_vh,
    stride_cb, stride_ch, stride_cr,
    BLOCK_H: tl.constexpr, BLOCK_D: tl.constexpr, QUANT: tl.constexpr,
):
    heads_in_block = tl.arange(0, BLOCK_H)
    d = tl.arange(0, BLOCK_D)
    for item in tl.range(tl.program_id(0), n_items, tl.num_programs(0)):
        token = item // head_blocks
        h = (item % head_blocks) * BLOCK_H + heads_in_block
        slot = tl.cast(tl.load(slot_mapping + token), tl.int64)
        # Padding (-1) leaves no live heads: nothing is read or written. (An
        # integer bound, not a broadcast scalar bool: the interpreter splats
        # scalar bools to integers, which tl.load rejects as a mask.)
        live_heads = tl.where(slot >= 0, num_heads, 0)
        mask = (h < live_heads)[:, None] & (d < head_dim)[None, :]
        safe_slot = tl.maximum(slot, 0)
        cache_base = (safe_slot // block_size) * stride_cb + (safe_slot % block_size) * stride_cr
        dst_offsets = cache_base + (h * stride_ch)[:, None] + d[None, :]
        token64 = tl.cast(token, tl.int64)
        scale_offsets = (h * head_dim)[:, None] + d[None, :]
        _copy_heads(key, key_cache, k_scale, token64 * stride_kt + (h * stride_kh)[:, None] + d[None, :],
                    dst_offsets, scale_offsets, mask, QUANT)
        _copy_heads(value, value_cache, v_scale, token64 * stride_vt + (h * stride_vh)[:, None] + d[None, :],
                    dst_offsets, scale_offsets, mask, QUANT)


def ascend_tile_bytes(block_h: int, block_d: int, elem_bytes: int, quant: bool) -> int:
    """UB bytes of one work item's buffers (see module doc)."""
    per_element = elem_bytes + (4 + 4 + 4 + 1 if quant else 0)
    return block_h * block_d * per_element


def tile_shape(num_heads: int, head_dim: int) -> tuple[int, int]:
    """(BLOCK_H, BLOCK_D): all of D, as many heads as fit ``MAX_TILE_ELEMENTS``."""
    block_d = triton.next_power_of_2(head_dim)
    block_h = max(1, min(triton.next_power_of_2(num_heads), MAX_TILE_ELEMENTS // block_d))
    return block_h, block_d


def _rows(x: torch.Tensor) -> torch.Tensor:
    """``x`` with unit stride along D (kernels index D directly); other strides are kept."""
    return x if x.stride(-1) == 1 else x.contiguous()


def reshape_and_cache(*, key, value, key_cache, value_cache, slot_mapping, k_scale, v_scale) -> None:
    """Triton implementation of ``qwen_ops.ops.reshape_and_cache`` (arguments validated by the op).

    key, value: [T, Hkv, D] (any strides; unit stride along D is made if missing);
    key_cache, value_cache: contiguous [NB, Hkv, Bs, D]; slot_mapping: [T]
    int32/int64 (-1 = padding); k_scale, v_scale: float32 [Hkv, D] for int8 caches.
    """
    t, hkv, d = key.shape
    if t == 0:
        return
    nb, _, bs, _ = key_cache.shape
    key, value = _rows(key), _rows(value)
    quant = key_cache.dtype == torch.int8
    if quant:
        k_scale, v_scale = k_scale.contiguous(), v_scale.contiguous()
    else:  # unused pointers; any tensor of the device will do
        k_scale = v_scale = slot_mapping
    block_h, block_d = tile_shape(hkv, d)
    if target(key.device) == "npu":
        assert 2 * ascend_tile_bytes(block_h, block_d, key.element_size(), quant) <= ASCEND_UB_BYTES
    head_blocks = triton.cdiv(hkv, block_h)
    n_items = t * head_blocks
    _reshape_and_cache_kernel.launch(
        key.device, n_items,
        key, value, key_cache, value_cache, slot_mapping.contiguous(), k_scale, v_scale,
        n_items, head_blocks, hkv, d, bs,
        key.stride(0), key.stride(1), value.stride(0), value.stride(1),
        key_cache.stride(0), key_cache.stride(1), key_cache.stride(2),
        BLOCK_H=block_h, BLOCK_D=block_d, QUANT=quant,
    )
