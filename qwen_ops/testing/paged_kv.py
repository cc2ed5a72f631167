"""Paged K/V caches and their metadata: block tables, slot mappings, lengths and offsets.

Layouts are the ops' (see ``qwen_ops.ops``): caches ``[NB, Hkv, Bs, D]``
(BNSD) in a float dtype or int8 with per-channel float32 scales ``[Hkv, D]``;
block tables int32 ``[N, M]``; offsets int32 ``[N + 1]``; slot mappings
``[T]`` with -1 for padding tokens.
"""
from __future__ import annotations

import torch

from .draw import Draw

INT8 = torch.int8


def offsets(lengths, device=None) -> torch.Tensor:
    """int32 [N + 1] cumulative offsets of ``lengths`` (``cu_seqlens`` / ``query_start_loc``)."""
    out = [0]
    for n in lengths:
        out.append(out[-1] + int(n))
    return torch.tensor(out, dtype=torch.int32, device=device)


def blocks_needed(lengths, block_size) -> list[int]:
    """Blocks of ``block_size`` tokens each request of ``lengths`` tokens occupies."""
    return [-(-int(n) // block_size) for n in lengths]


def block_tables(draw: Draw, lengths, block_size, *, width=None, spare_blocks=0):
    """Tables holding ``lengths[r]`` tokens for request r, in distinct shuffled blocks.

    Returns (int32 [N, width] tables, number of blocks NB). Entries past a
    request's blocks are -1, so a kernel reading them fails. ``width``
    defaults to one column past the longest request; NB is the blocks used
    (at least one) plus ``spare_blocks`` that no request owns.
    """
    need = blocks_needed(lengths, block_size)
    if width is None:
        width = max(need, default=0) + 1
    num_blocks = max(1, sum(need)) + spare_blocks
    ids = draw.randperm(num_blocks, dtype=torch.int32)
    tables = torch.full((len(need), width), -1, dtype=torch.int32, device=draw.device)
    start = 0
    for r, n in enumerate(need):
        tables[r, :n] = ids[start:start + n]
        start += n
    return tables, num_blocks


def random_cache(draw: Draw, shape, dtype) -> torch.Tensor:
    """A cache full of non-zero garbage (int8: every value in [-128, 127]), so stray or missing writes show."""
    if dtype == INT8:
        return draw.randint(-128, 128, tuple(shape), dtype=INT8)
    return draw.randn(*shape, dtype=dtype)


def int8_scales(draw: Draw, hkv, d, low=0.004, high=0.016) -> torch.Tensor:
    """float32 [Hkv, D] per-channel scales in [low, high), varied so that a channel mix-up shows."""
    return draw.uniform(hkv, d, low=low, high=high)


def paged_cache(draw: Draw, num_blocks, hkv, block_size, head_dim, dtype, *, int8="calibrated") -> dict:
    """Key and value caches ``[NB, Hkv, Bs, D]`` of ``dtype`` with their scales.

    Returns dict(key_cache, value_cache, k_scale, v_scale); scales are None
    for float caches. INT8 caches are either ``"calibrated"`` (normal values
    quantized with scales from their absmax, as an engine stores them) or
    ``"random"`` (garbage int8 with :func:`int8_scales`).
    """
    shape = (num_blocks, hkv, block_size, head_dim)
    if dtype != INT8:
        return dict(key_cache=draw.randn(*shape, dtype=dtype), value_cache=draw.randn(*shape, dtype=dtype),
                    k_scale=None, v_scale=None)
    if int8 == "random":
        return dict(key_cache=random_cache(draw, shape, INT8), value_cache=random_cache(draw, shape, INT8),
                    k_scale=int8_scales(draw, hkv, head_dim), v_scale=int8_scales(draw, hkv, head_dim))
    if int8 != "calibrated":
        raise ValueError(f"paged_cache: int8 must be 'calibrated' or 'random', got {int8!r}")
    from qwen_ops import ops

    out = {}
    for name in ("key", "value"):
        token_major = draw.randn(*shape).transpose(1, 2)  # [NB, Bs, Hkv, D]
        scale = ops.kv_scales_from_absmax(token_major)
        out[f"{name}_cache"] = ops.quantize_int8(token_major, scale).transpose(1, 2).contiguous()
        out[f"{name[0]}_scale"] = scale
    return out


def slot_mapping(draw: Draw, num_slots, tokens, *, padding=None, dtype=torch.int32) -> torch.Tensor:
    """[tokens] distinct random slots in [0, num_slots); entries selected by ``padding`` set to -1.

    ``padding`` is any index of the result (an int, a slice, a list), e.g.
    ``slice(1, None, 3)`` pads every third token from the second.
    """
    slots = draw.randperm(num_slots)[:tokens]
    if padding is not None and tokens:
        slots[padding] = -1
    return slots.to(dtype)
