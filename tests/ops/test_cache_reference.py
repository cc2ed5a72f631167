"""The torch reference of ``reshape_and_cache`` and the INT8 helpers against naive loops.

The loops here are written independently of ``ops/cache/reference.py``: token
by token and head by head, in float64, from the contract (slot = block * Bs +
row, int8 ``q = clamp(round_half_to_even(x / scale), -128, 127)``, a NaN
quotient stored as 0).
"""
import math

import pytest
import torch

from qwen_ops.ops import dequantize_int8, kv_scales_from_absmax, quantize_int8, reshape_and_cache
from qwen_ops.testing import Draw, random_cache, slot_mapping
from tolerances import INT8_SCALE_VS_FLOAT64, tol

F32, F16, BF16, I8 = torch.float32, torch.float16, torch.bfloat16, torch.int8


def naive_quantize(x: float, scale: float) -> int:
    """Contract: clamp(round_half_to_even(x / scale), -128, 127); Python's round is half-to-even.

    Non-finite quotients: NaN is stored as 0, +-inf clamp to 127 / -128.
    """
    quotient = x / scale
    if math.isnan(quotient):
        return 0
    if math.isinf(quotient):
        return 127 if quotient > 0 else -128
    return max(-128, min(127, round(quotient)))


def near_tie(x: float, scale: float) -> bool:
    """x / scale within float32 division error of a .5 tie, where float32 and float64 may round apart."""
    quotient = x / scale
    return math.isfinite(quotient) and abs(abs(quotient - int(quotient)) - 0.5) < 1e-5


def naive_reshape_and_cache(key, value, key_cache, value_cache, slot_mapping, k_scale, v_scale):
    """Expected caches after the write, plus the set of int8 entries that sit on an ambiguous tie."""
    block_size = key_cache.shape[2]
    expected, ties = [key_cache.clone(), value_cache.clone()], set()
    for t, slot in enumerate(slot_mapping.tolist()):
        if slot == -1:
            continue  # padding token: nothing written
        block, row = slot // block_size, slot % block_size
        for which, (src, scale) in enumerate(((key, k_scale), (value, v_scale))):
            for h in range(src.shape[1]):
                x = src[t, h].double().tolist()
                if scale is None:
                    expected[which][block, h, row] = src[t, h]
                    continue
                s = scale[h].double().tolist()
                for i in range(len(x)):
                    expected[which][block, h, row, i] = naive_quantize(x[i], s[i])
                    if near_tie(x[i], s[i]):
                        ties.add((which, block, h, row, i))
    return expected, ties


def assert_int8_equal_outside_ties(got, want, ties, which):
    diff = (got.to(torch.int16) - want.to(torch.int16)).abs()
    for (w, *index) in ties:
        if w == which:
            assert diff[tuple(index)] <= 1
            diff[tuple(index)] = 0
    assert int(diff.max()) == 0, f"{int((diff > 0).sum())} int8 entries differ from the naive quantization"


# (cache dtype, key dtype, Hkv, D, Bs): every dtype pairing once, each D and Bs at least twice.
WRITE_CASES = [
    (F32, F32, 1, 64, 16),
    (F16, F16, 2, 128, 64),
    (BF16, BF16, 4, 256, 128),
    (I8, F32, 2, 64, 128),
    (I8, F16, 1, 256, 16),
    (I8, BF16, 4, 128, 64),
]


@pytest.mark.parametrize("cache_dtype,key_dtype,num_kv_heads,head_dim,block_size", WRITE_CASES,
                         ids=[f"{c}-{k}-hkv{h}-d{d}-bs{b}".replace("torch.", "") for c, k, h, d, b in WRITE_CASES])
def test_reshape_and_cache_matches_naive_loop(gen, cache_dtype, key_dtype, num_kv_heads, head_dim, block_size):
    num_blocks, num_tokens = 5, 9
    shape = (num_blocks, num_kv_heads, block_size, head_dim)
    # Caches full of non-zero garbage, so that a stray or missing write shows.
    key_cache, value_cache = (random_cache(Draw(gen), shape, cache_dtype) for _ in range(2))
    key = (3 * torch.randn(num_tokens, num_kv_heads, head_dim, generator=gen)).to(key_dtype)
    value = (3 * torch.randn(num_tokens, num_kv_heads, head_dim, generator=gen)).to(key_dtype)
    k_scale = v_scale = None
    if cache_dtype == I8:
        # Below the calibrated scale, so the largest values saturate at -128/127.
        k_scale = kv_scales_from_absmax(key) * 0.75
        v_scale = kv_scales_from_absmax(value) * 0.75

    # Block edges (first/last row of a block, first/last slot of the cache), random slots
    # elsewhere, and two padding tokens, all shuffled.
    edges = [block_size - 1, block_size, 0, num_blocks * block_size - 1]
    others = [s for s in torch.randperm(num_blocks * block_size, generator=gen).tolist() if s not in edges]
    slots = edges + others[: num_tokens - 2 - len(edges)] + [-1, -1]
    slot_mapping = torch.tensor(slots)[torch.randperm(num_tokens, generator=gen)].to(torch.int32)

    expected, ties = naive_reshape_and_cache(key, value, key_cache, value_cache, slot_mapping, k_scale, v_scale)
    reshape_and_cache(key, value, key_cache, value_cache, slot_mapping, k_scale, v_scale, backend="torch")

    for which, (got, want) in enumerate(((key_cache, expected[0]), (value_cache, expected[1]))):
        if cache_dtype == I8:
            assert_int8_equal_outside_ties(got, want, ties, which)
            assert int(got.min()) == -128 and int(got.max()) == 127  # saturation happened
        else:
            assert torch.equal(got, want)


@pytest.mark.parametrize("key_dtype", [F32, F16, BF16], ids=str)
def test_int8_quantization_rounds_half_to_even_and_saturates(key_dtype):
    scale = 2.0 ** -4  # a power of two, so multiples of scale / 2 are exact ties
    multiples = [0.5, 1.5, 2.5, 3.5, -0.5, -1.5, -2.5, 126.5, 127.5, 200.0, -127.5, -129.0, -130.0, -1000.0]
    stored = [0, 2, 2, 4, 0, -2, -2, 126, 127, 127, -128, -128, -128, -128]
    d = len(multiples)
    x = torch.tensor(multiples).mul(scale).to(key_dtype)
    assert x.double().div(scale).tolist() == multiples  # the inputs really are exact ties
    scales = torch.full((1, d), scale)

    assert quantize_int8(x.view(1, d), scales).view(-1).tolist() == stored

    # The same through the op, into one row of an int8 cache.
    key_cache, value_cache = torch.zeros(2, 1, 16, d, dtype=I8), torch.zeros(2, 1, 16, d, dtype=I8)
    slot = torch.tensor([17], dtype=torch.int32)  # block 1, row 1
    reshape_and_cache(x.view(1, 1, d), -x.view(1, 1, d), key_cache, value_cache, slot, scales, scales,
                      backend="torch")
    assert key_cache[1, 0, 1].tolist() == stored
    assert value_cache[1, 0, 1].tolist() == [0, -2, -2, -4, 0, 2, 2, -126, -128, -128, 127, 127, 127, 127]
    written = torch.zeros_like(key_cache, dtype=torch.bool)
    written[1, 0, 1] = True
    assert not key_cache[~written].any()  # nothing else was touched

    assert dequantize_int8(key_cache[1, 0, 1].view(1, d), scales).view(-1).tolist() == [q * scale for q in stored]


@pytest.mark.parametrize("dtype", [F32, F16, BF16], ids=str)
def test_kv_scales_from_absmax(gen, dtype):
    x = torch.randn(2, 5, 2, 64, generator=gen).to(dtype)
    x[..., 0, 3] = 0  # an all-zero channel: floored at 1e-8
    x[..., 1, 5] = 1e-7 * torch.rand(2, 5, generator=gen)  # tiny: max / 127 < 1e-8, also floored
    x[..., 1, 6] = -40.0 * torch.rand(2, 5, generator=gen) - 1  # large negative values: |x| counts
    scales = kv_scales_from_absmax(x)
    assert scales.dtype == F32 and scales.shape == (2, 64)

    expected = torch.empty(2, 64, dtype=torch.float64)
    for h in range(2):
        for c in range(64):
            channel = x[:, :, h, c].double().flatten().tolist()
            expected[h, c] = max(max(abs(v) for v in channel) / 127, 1e-8)
    torch.testing.assert_close(scales.double(), expected, **tol(INT8_SCALE_VS_FLOAT64, F32))
    floor = torch.tensor(1e-8, dtype=F32)
    assert scales[0, 3] == floor and scales[1, 5] == floor


@pytest.mark.parametrize("dtype", [F32, F16, BF16], ids=str)
def test_int8_round_trip_with_calibrated_scales_is_within_half_a_step(gen, dtype):
    num_tokens, num_kv_heads, head_dim, block_size = 6, 2, 128, 16
    key = torch.randn(num_tokens, num_kv_heads, head_dim, generator=gen).to(dtype)
    value = torch.randn(num_tokens, num_kv_heads, head_dim, generator=gen).to(dtype)
    k_scale, v_scale = kv_scales_from_absmax(key), kv_scales_from_absmax(value)
    shape = (2, num_kv_heads, block_size, head_dim)
    key_cache, value_cache = (random_cache(Draw(gen), shape, I8) for _ in range(2))
    slots = slot_mapping(Draw(gen), 2 * block_size, num_tokens)
    reshape_and_cache(key, value, key_cache, value_cache, slots, k_scale, v_scale, backend="torch")

    for src, cache, scale in ((key, key_cache, k_scale), (value, value_cache, v_scale)):
        blocks, rows = slots.long() // block_size, slots.long() % block_size
        restored = dequantize_int8(cache[blocks, :, rows], scale)
        # Calibrated scales never clamp, so only rounding error remains (plus float32 slack).
        assert bool(((restored.double() - src.double()).abs() <= scale.double() * (0.5 + 1e-5)).all())


@pytest.mark.parametrize("key_dtype", [F32, F16, BF16], ids=str)
def test_int8_non_finite_and_huge_values_match_naive_loop(gen, key_dtype):
    """NaN -> 0, +inf -> 127, -inf -> -128, and the dtype's largest finite values
    (whose float32 quotient overflows to inf for float32 keys) saturate, against
    the float64 loop, through the op and through ``quantize_int8``."""
    num_tokens, head_dim, block_size = 3, 64, 16
    big = torch.finfo(key_dtype).max
    special = torch.tensor([float("nan"), float("inf"), -float("inf"), big, -big, -float("nan")])
    key = (3 * torch.randn(num_tokens, 1, head_dim, generator=gen)).to(key_dtype)
    key[0, 0, :6] = special.to(key_dtype)
    key[2, 0, 10:16] = special.to(key_dtype)
    value = -key
    k_scale = torch.rand(1, head_dim, generator=gen) * 0.01 + 1e-3
    v_scale = torch.rand(1, head_dim, generator=gen) * 0.01 + 1e-3
    shape = (2, 1, block_size, head_dim)
    key_cache, value_cache = (random_cache(Draw(gen), shape, I8) for _ in range(2))
    slot_mapping = torch.tensor([5, -1, 16], dtype=torch.int32)

    expected, ties = naive_reshape_and_cache(key, value, key_cache, value_cache, slot_mapping, k_scale, v_scale)
    reshape_and_cache(key, value, key_cache, value_cache, slot_mapping, k_scale, v_scale, backend="torch")
    for which, (got, want) in enumerate(((key_cache, expected[0]), (value_cache, expected[1]))):
        assert_int8_equal_outside_ties(got, want, ties, which)
    assert key_cache[0, 0, 5, :6].tolist() == [0, 127, -128, 127, -128, 0]
    assert value_cache[1, 0, 0, 10:16].tolist() == [0, -128, 127, -128, 127, 0]
    assert quantize_int8(key[0], k_scale)[0, :6].tolist() == [0, 127, -128, 127, -128, 0]
