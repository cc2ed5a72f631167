"""Torch reference for writing into the paged KV cache (defines the semantics).

Contract. ``key_cache``/``value_cache`` are paged BNSD [NB, Hkv, Bs, D]; the
slot of a token is ``block * Bs + row`` and the token's head h lands at
``cache[block, h, row, :]``. Slot -1 marks padding: that token is not written,
and nothing outside the given slots changes. Float caches store the token as
is (same dtype); INT8 caches store it symmetric per channel,
``clamp(round_half_to_even(x / scale), -128, 127)`` with float32 [Hkv, D]
scales, and read back as ``q * scale``. Non-finite quotients are defined
too: NaN is stored as 0, +inf as 127 and -inf as -128 (the clamp).
"""
from __future__ import annotations

import torch


def quantize_int8(x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """Symmetric per-channel INT8: ``clamp(round_half_to_even(x / scale), -128, 127)``.

    ``x``: [..., Hkv, D] float; ``scale``: float32 [Hkv, D] > 0. Division in
    float32; ``torch.round`` rounds half to even. A NaN quotient is stored as
    0 (made explicit: casting NaN to int8 is undefined behaviour in C++ and
    differs between backends); +-inf and huge finite values clamp to 127/-128.
    """
    quotient = torch.nan_to_num(x.to(torch.float32) / scale, nan=0.0, posinf=127.0, neginf=-128.0)
    return torch.clamp(torch.round(quotient), -128, 127).to(torch.int8)


def dequantize_int8(q: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """``q * scale`` in float32. ``q``: int8 [..., Hkv, D]; ``scale``: float32 [Hkv, D]."""
    return q.to(torch.float32) * scale


def reshape_and_cache(*, key, value, key_cache, value_cache, slot_mapping, k_scale, v_scale) -> None:
    """Write key/value [T, Hkv, D] to their slots ([T], -1 = skip) of the caches, in place.

    Inputs are validated by the public op (unique slots in range, scales only
    and always for int8 caches).
    """
    bs = key_cache.shape[2]
    keep = slot_mapping >= 0
    slots = slot_mapping[keep].to(torch.int64)
    blocks, rows = slots // bs, slots % bs
    for src, cache, scale in ((key[keep], key_cache, k_scale), (value[keep], value_cache, v_scale)):
        data = quantize_int8(src, scale) if cache.dtype == torch.int8 else src.to(cache.dtype)
        # cache[blocks, :, rows] has shape [n, Hkv, D], matching data.
        cache[blocks, :, rows] = data
