"""Triton ``reshape_and_cache`` against the torch reference.

On a CPU-only machine the kernel runs under Triton's interpreter
(``TRITON_INTERPRET=1``, set by ``tests/conftest.py``); on a machine with a GPU
the same tests run the compiled kernel on CUDA tensors. The cache write is a
copy (float caches) or a deterministic quantization (int8 caches), so the
kernel must match the reference bit for bit: ``torch.equal``, no tolerance.
The kernel has no ``tl.dot``, so bfloat16 is tested under the interpreter too.
Shapes are small because the interpreter executes each tile op in numpy.
"""
import os

import pytest
import torch

from qwen_ops import ops
from qwen_ops.testing import Draw, cache_write_call, random_cache, slot_mapping

DEVICE = torch.device("cuda" if torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1" else "cpu")


def _caches(gen, num_blocks, hkv, block_size, head_dim, dtype):
    """Two caches pre-filled with garbage, so that unwritten slots are checked to stay intact."""
    draw, shape = Draw(gen), (num_blocks, hkv, block_size, head_dim)
    return [random_cache(draw, shape, dtype) for _ in range(2)]


def _run_both(key, value, key_cache, value_cache, slot_mapping, k_scale=None, v_scale=None):
    """Run the reference and the kernel on copies of the caches; return both pairs (on the CPU)."""
    results = []
    for backend in ("torch", "triton"):
        kc, vc = key_cache.clone().to(DEVICE), value_cache.clone().to(DEVICE)
        ops.reshape_and_cache(key.to(DEVICE), value.to(DEVICE), kc, vc, slot_mapping.to(DEVICE),
                              None if k_scale is None else k_scale.to(DEVICE),
                              None if v_scale is None else v_scale.to(DEVICE), backend=backend)
        results.append((kc.cpu(), vc.cpu()))
    return results


def _assert_same(results, key_cache, value_cache, slots, block_size):
    (ref_k, ref_v), (tri_k, tri_v) = results
    assert torch.equal(tri_k, ref_k)
    assert torch.equal(tri_v, ref_v)
    # The premise of the comparison: the step really wrote something, and
    # only the mapped slots changed.
    written = torch.zeros(key_cache.shape[0] * block_size, dtype=torch.bool)
    written[slots[slots >= 0].long()] = True
    untouched = ~written.reshape(key_cache.shape[0], block_size)
    for cache, before in ((tri_k, key_cache), (tri_v, value_cache)):
        rows = cache.transpose(1, 2)  # [NB, Bs, Hkv, D]
        assert torch.equal(rows[untouched], before.transpose(1, 2)[untouched])
        assert not torch.equal(cache, before) or not written.any()


# (dtype of key/value, cache dtype, T, Hkv, D, Bs, NB): why each shape.
CASES = [
    # float16 copy with padding; Bs = 16 and a token count that is not a multiple of anything.
    pytest.param(torch.float16, torch.float16, 9, 2, 64, 16, 4, id="fp16-bs16"),
    # float32, the largest block size (Bs = 128) and D = 256, few tokens to stay fast.
    pytest.param(torch.float32, torch.float32, 5, 1, 256, 128, 2, id="fp32-bs128-d256"),
    # int8 from float16 with 3 KV heads (not a power of two: masked head rows), Bs = 64.
    pytest.param(torch.float16, torch.int8, 8, 3, 64, 64, 2, id="int8-from-fp16-bs64"),
    # int8 from float32, D = 128.
    pytest.param(torch.float32, torch.int8, 6, 2, 128, 16, 3, id="int8-from-fp32-d128"),
    # bfloat16: this kernel has no tl.dot, so bf16 is exact under the interpreter too.
    pytest.param(torch.bfloat16, torch.bfloat16, 6, 2, 64, 16, 2, id="bf16"),
    pytest.param(torch.bfloat16, torch.int8, 6, 2, 64, 16, 2, id="int8-from-bf16"),
]


@pytest.mark.parametrize("dtype, cache_dtype, t, hkv, d, bs, nb", CASES)
@pytest.mark.parametrize("index_dtype", [torch.int32, torch.int64])
def test_matches_reference(gen, dtype, cache_dtype, t, hkv, d, bs, nb, index_dtype):
    # Caches full of garbage, random per-channel scales (not powers of two, so the division is inexact),
    # token 1 padding.
    call = cache_write_call(Draw(gen), tokens=t, hkv=hkv, head_dim=d, block_size=bs, num_blocks=nb, dtype=dtype,
                            cache_dtype=cache_dtype, key_scale=2.0, padding=1, slot_dtype=index_dtype)
    results = _run_both(**call)
    _assert_same(results, call["key_cache"], call["value_cache"], call["slot_mapping"], bs)


def test_strided_key_value(gen):
    """key/value as views of one fused QKV projection output (row stride != Hkv * D), as engines pass them."""
    t, hkv, d, bs, nb = 7, 2, 64, 16, 2
    qkv = torch.randn(t, 4 + 2 * hkv, d, generator=gen).to(torch.float16)
    key, value = qkv[:, 4:4 + hkv], qkv[:, 4 + hkv:]
    assert not key.is_contiguous()
    slots = slot_mapping(Draw(gen), nb * bs, t)
    key_cache, value_cache = _caches(gen, nb, hkv, bs, d, torch.float16)
    _assert_same(_run_both(key, value, key_cache, value_cache, slots), key_cache, value_cache, slots, bs)


def test_all_padding_writes_nothing(gen):
    t, hkv, d, bs, nb = 4, 1, 64, 16, 1
    key = torch.randn(t, hkv, d, generator=gen)
    value = torch.randn(t, hkv, d, generator=gen)
    slots = torch.full((t,), -1, dtype=torch.int32)
    key_cache, value_cache = _caches(gen, nb, hkv, bs, d, torch.float32)
    (_, _), (tri_k, tri_v) = _run_both(key, value, key_cache, value_cache, slots)
    assert torch.equal(tri_k, key_cache) and torch.equal(tri_v, value_cache)


def test_int8_rounds_half_to_even_and_clamps():
    """Exact ties and out-of-range values, with scale 1 so that x / scale is exact.

    Covers the kernel's own round-half-to-even (floor plus tie detection):
    every half-integer from -140 to 140, its float32 neighbours one ulp away
    and values far outside [-128, 127].
    """
    halves = torch.arange(-280, 281, dtype=torch.float32) / 2
    near = torch.cat([torch.nextafter(halves, torch.tensor(-1e9)), torch.nextafter(halves, torch.tensor(1e9))])
    extremes = torch.tensor([-1e6, -300.0, -128.5, -128.49, 127.49, 127.5, 128.0, 1e6])
    x = torch.cat([halves, near, extremes])
    d = 64
    x = torch.cat([x, x[: (-x.numel()) % d]]) if x.numel() % d else x
    t = x.numel() // d
    key = x.reshape(t, 1, d)
    value = -key
    ones = torch.ones(1, d)
    slots = torch.arange(t, dtype=torch.int32)
    key_cache = torch.zeros(1, 1, t, d, dtype=torch.int8)
    value_cache = torch.zeros_like(key_cache)
    (ref_k, ref_v), (tri_k, tri_v) = _run_both(key, value, key_cache, value_cache, slots, ones, ones)
    assert torch.equal(tri_k, ref_k) and torch.equal(tri_v, ref_v)
    # Independent of the reference: Python's round() is half-to-even too.
    expected = torch.tensor([max(-128, min(127, round(v))) for v in key.reshape(-1).tolist()], dtype=torch.int8)
    assert torch.equal(tri_k[0, 0].reshape(-1), expected)
    assert tri_k[0, 0].reshape(-1)[:6].tolist() == [-128] * 6  # -140 ... -137.5 clamp


def _non_finite_keys(dtype, d):
    """[2, 1, d] keys of ``dtype``: NaN, +-inf, the dtype's largest finite values
    (whose quotient overflows float32 for float32 keys), then random-free steps."""
    big = torch.finfo(dtype).max
    special = torch.tensor([float("nan"), float("inf"), -float("inf"), big, -big, -float("nan")])
    ramp = torch.linspace(-3.0, 3.0, 2 * d - special.numel())
    return torch.cat([special, ramp]).to(dtype).reshape(2, 1, d)


# The interpreter's numpy division warns when huge keys overflow float32: intended here.
@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
def test_int8_non_finite_values(gen, dtype):
    """NaN is stored as 0, +inf and huge values as 127, -inf and huge negatives as -128, like the reference."""
    d = 64
    key = _non_finite_keys(dtype, d)
    value = -key
    scale = torch.rand(1, d, generator=gen) * 0.01 + 1e-3
    slots = torch.tensor([3, 16], dtype=torch.int32)
    key_cache, value_cache = _caches(gen, 2, 1, 16, d, torch.int8)
    results = _run_both(key, value, key_cache, value_cache, slots, scale, scale)
    _assert_same(results, key_cache, value_cache, slots, 16)
    # Independent of the reference: the contract's values for the special entries.
    tri_k, tri_v = results[1]
    assert tri_k[0, 0, 3, :6].tolist() == [0, 127, -128, 127, -128, 0]
    assert tri_v[0, 0, 3, :6].tolist() == [0, -128, 127, -128, 127, 0]


def test_float_cache_copies_non_finite_values_bit_for_bit(gen):
    """Float caches copy NaN and +-inf unchanged (compared as bits: NaN != NaN)."""
    d = 64
    key = _non_finite_keys(torch.float16, d)
    slots = torch.tensor([0, 5], dtype=torch.int32)
    key_cache, value_cache = _caches(gen, 1, 1, 16, d, torch.float16)
    (ref_k, ref_v), (tri_k, tri_v) = _run_both(key, -key, key_cache, value_cache, slots)
    assert torch.equal(tri_k.view(torch.int16), ref_k.view(torch.int16))
    assert torch.equal(tri_v.view(torch.int16), ref_v.view(torch.int16))
    assert torch.equal(tri_k[0, 0, 0].view(torch.int16), key[0, 0].view(torch.int16))
