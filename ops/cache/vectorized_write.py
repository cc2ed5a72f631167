"""KV cache write as row copies into the cache's [Bs, D] slabs: what the torch backend runs on the CPU.

(On CPU tensors with ``qwen_ops._C`` built, ``cpu_write_kernel.write_step`` serves the call
first, in one C++ pass; the torch form below runs without the extension.)

Same contract and semantics as ``reference.reshape_and_cache`` (kept as the
readable definition), and bit-identical to it (the same float32 division,
NaN/inf mapping, round-half-even and clamp for INT8 caches; float caches store
the same values); tested against it (``tests/ops/test_vectorized_cpu_forms.py``).
Differences, for speed:

* Token t's head h lands in row ``(block * Hkv + h) * Bs + row`` of the cache
  viewed as [NB * Hkv * Bs, D]; with ``key`` viewed as [T * Hkv, D] that is one
  ``index_copy_`` of contiguous D-element rows per cache, instead of an
  advanced-index assignment with two index tensors around a sliced dimension.
* No masked copy of the inputs when no slot is padding (the usual case).
* INT8: the tokens are quantized ``TILE_TOKENS`` at a time, in place in one
  reused float32 buffer and one int8 buffer (division, NaN/inf mapping, round,
  clamp), instead of a fresh full-size temporary per step, whose first-touch
  page faults cost more than the arithmetic.
"""
from __future__ import annotations

import torch

from .cpu_write_kernel import write_step

F32 = torch.float32
I64 = torch.int64
TILE_TOKENS = 512  # INT8 quantization tile: 512 tokens x 2 heads x 256 x 4 bytes = 1 MiB of float32


def _cache_rows(slots: torch.Tensor, num_kv_heads: int, block_size: int) -> torch.Tensor:
    """int64 [T * Hkv] rows of the cache viewed as [NB * Hkv * Bs, D] for tokens at ``slots`` [T], head inner."""
    blocks, rows = slots // block_size, slots % block_size
    head = torch.arange(num_kv_heads, device=slots.device)
    return ((blocks[:, None] * num_kv_heads + head) * block_size + rows[:, None]).reshape(-1)


def _write_int8(src: torch.Tensor, cache_rows: torch.Tensor, flat_cache: torch.Tensor, scale: torch.Tensor):
    """Quantize src [T, Hkv, D] as ``reference.quantize_int8`` does and copy it to ``cache_rows`` of flat_cache."""
    tokens, hkv, d = src.shape
    tile = min(TILE_TOKENS, tokens)
    quotient = torch.empty(tile, hkv, d, dtype=F32, device=src.device)
    stored = torch.empty(tile, hkv, d, dtype=torch.int8, device=src.device)
    for first in range(0, tokens, tile):
        last = min(first + tile, tokens)
        q, s = quotient[: last - first], stored[: last - first]
        torch.div(src[first:last], scale, out=q)  # float32 division (src promoted), as the reference
        q.nan_to_num_(nan=0.0, posinf=127.0, neginf=-128.0).round_().clamp_(-128, 127)
        s.copy_(q)  # integral values in [-128, 127]: exact
        flat_cache.index_copy_(0, cache_rows[first * hkv: last * hkv], s.view(-1, d))


def reshape_and_cache(*, key, value, key_cache, value_cache, slot_mapping, k_scale, v_scale) -> None:
    """Write key/value [T, Hkv, D] to their slots ([T], -1 = skip) of the caches, in place; see ``reference.py``."""
    if write_step(key=key, value=value, key_cache=key_cache, value_cache=value_cache, slot_mapping=slot_mapping,
                  k_scale=k_scale, v_scale=v_scale):
        return  # the C++ one-pass write (cpu_write_kernel.py); the torch form below where it does not apply
    num_blocks, hkv, block_size, d = key_cache.shape
    slots = slot_mapping.to(I64)
    kept = (slots >= 0).nonzero().squeeze(-1)  # its length is known without reading a value (no host sync)
    if kept.numel() != slots.numel():
        key, value, slots = key.index_select(0, kept), value.index_select(0, kept), slots[kept]
    if slots.numel() == 0:
        return
    rows = _cache_rows(slots, hkv, block_size)
    for src, cache, scale in ((key, key_cache, k_scale), (value, value_cache, v_scale)):
        flat = cache.view(num_blocks * hkv * block_size, d)
        if cache.dtype == torch.int8:
            _write_int8(src, rows, flat, scale)
        else:
            flat.index_copy_(0, rows, src.reshape(-1, d).to(cache.dtype))
