"""Every instruction-set variant of the C++ KV-cache kernels (``bindings/cpu/``) against the references.

``qwen_ops._C.paged_decode_attention_cpu`` and ``reshape_and_cache_cpu`` run
the widest variant the CPU supports (portable, AVX2 + FMA, AVX-512F; float32, int8 and bfloat16 caches;
``_C.cpu_isas()``) unless told one by ``isa``: here each variant is called by name
(skipped, with the reason, where this CPU lacks it), at head sizes and block sizes that leave a tail past
every variant's vector width (D = 20, 36; Bs = 5) as well as Qwen3.5's own
(D = 256, Bs = 16), and with head groups that do not fill the kernel's passes
of 4 query heads (G = 1, 3, 6).
"""
from __future__ import annotations

import pytest
import torch
from cpu_kernel_paths import ALL_ISAS, cpu_kernel_or_skip, isa_or_skip
from tolerances import DECODE_KERNEL_AT_HEAD_256, VECTORIZED_VS_REFERENCE, tol

from qwen_ops.ops.attention import cpu_decode_kernel
from qwen_ops.ops.attention import reference as attention_reference
from qwen_ops.ops.cache import cpu_write_kernel
from qwen_ops.ops.cache import reference as cache_reference
from qwen_ops.testing import Draw, cache_write_call, decode_call

F32, INT8, BF16 = torch.float32, torch.int8, torch.bfloat16




def _attention(kernel, arguments, isa):
    out = torch.full_like(arguments["query"], float("nan"))  # every element must be written
    kernel(arguments["query"], arguments["key_cache"], arguments["value_cache"], arguments["block_tables"],
           arguments["seq_lens"], arguments["scale"], arguments["k_scale"], arguments["v_scale"], out, isa)
    return out


@pytest.mark.parametrize("isa", ALL_ISAS)
@pytest.mark.parametrize("cache_dtype", [F32, INT8, BF16])
@pytest.mark.parametrize("hq,hkv,d,bs", [(8, 2, 256, 16), (8, 2, 20, 16), (6, 2, 36, 5), (12, 2, 32, 16),
                                         (2, 2, 24, 8)])
def test_decode_attention_every_isa_matches_reference(gen, isa, cache_dtype, hq, hkv, d, bs):
    isa_or_skip(isa)
    kernel = cpu_kernel_or_skip(cpu_decode_kernel)
    # Unequal lengths: empty, one token, a partial last block, many blocks (the online softmax rescales).
    arguments = decode_call(Draw(gen), F32, cache_dtype, hq, hkv, d, bs, [0, 1, 3 * bs + 2, 37, 200], width=45)
    arguments["scale"] = d ** -0.5
    arguments["query"] *= 3.0  # sharp softmaxes: a wrong running max or exponential would show
    expected = attention_reference.paged_decode_attention(**arguments)
    before = {name: value.clone() for name, value in arguments.items() if torch.is_tensor(value)}
    got = _attention(kernel, arguments, isa)
    torch.testing.assert_close(got, expected, **tol(DECODE_KERNEL_AT_HEAD_256 if d == 256 else VECTORIZED_VS_REFERENCE,
                                                    F32))
    assert torch.equal(got[0], torch.zeros_like(got[0]))  # the empty request's row is exactly zero
    for name, value in before.items():
        assert torch.equal(arguments[name], value), f"{name} was modified"


@pytest.mark.parametrize("isa", ALL_ISAS)
def test_decode_attention_exponentials_over_a_wide_range(gen, isa):
    isa_or_skip(isa)
    # Integer queries and keys and a power-of-two scale make every score exact in any summation order, so only
    # the exponentials (and the weighted sums of V) can differ from the reference; the scores spread over about
    # [-150, 0] below their max: the running-max rescales, weights near the float32 normal range's end and under it.
    kernel = cpu_kernel_or_skip(cpu_decode_kernel)
    arguments = decode_call(Draw(gen), F32, F32, 4, 1, 16, 16, [160, 97], width=10)
    arguments["query"] = torch.round(arguments["query"] * 3.0)
    arguments["key_cache"] = torch.round(arguments["key_cache"] * 3.0)
    arguments["scale"] = 0.5
    expected = attention_reference.paged_decode_attention(**arguments)
    torch.testing.assert_close(_attention(kernel, arguments, isa), expected, **tol(VECTORIZED_VS_REFERENCE, F32))


def test_decode_attention_rejects_an_unknown_isa(gen):
    kernel = cpu_kernel_or_skip(cpu_decode_kernel)
    arguments = decode_call(Draw(gen), F32, F32, 4, 2, 16, 8, [3])
    arguments["scale"] = 0.25
    out = torch.full_like(arguments["query"], 7.0)
    with pytest.raises(RuntimeError, match="argument 'isa' must be one of 'portable', 'avx2', 'avx512', got 'sse9'"):
        kernel(arguments["query"], arguments["key_cache"], arguments["value_cache"], arguments["block_tables"],
               arguments["seq_lens"], 0.25, None, None, out, "sse9")
    assert torch.equal(out, torch.full_like(out, 7.0))


# Quotients (at scale 1) the INT8 write must map exactly as the reference: NaN -> 0, +-inf and out-of-range
# values clamped, the rounding's ties (half to even, both signs) just inside and outside the clamp, values one
# float32 ulp either side of a tie, signed zero and subnormals.
INT8_EDGE_VALUES = [float("nan"), float("inf"), -float("inf"), 0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 126.5, 127.5,
                    -127.5, -128.5, 1e30, -1e30, 0.49999997, 0.50000006, -0.50000006, 2.4999998, -0.0, 1e-40,
                    -1e-40, 127.49999, -128.49998, 3.5, -3.5]


@pytest.mark.parametrize("isa", ALL_ISAS)
@pytest.mark.parametrize("head_dim", [16, 37, 256])  # 37: a tail past every variant's 8 or 16 lanes
def test_int8_cache_write_every_isa_is_bit_identical(gen, isa, head_dim):
    isa_or_skip(isa)
    kernel = cpu_kernel_or_skip(cpu_write_kernel)
    draw = Draw(gen)
    arguments = cache_write_call(draw, tokens=13, hkv=2, head_dim=head_dim, block_size=4, num_blocks=5, dtype=F32,
                                 cache_dtype=INT8, padding=slice(2, None, 5), key_scale=2.0)
    arguments["k_scale"][0] = 1.0
    edges = torch.tensor(INT8_EDGE_VALUES, dtype=F32)
    count = min(head_dim, edges.numel())
    arguments["key"][0, 0, :count] = edges[:count]
    arguments["key"][1, 0, -count:] = edges[:count]  # the edges in the tail lanes too
    # Exact half-integers over the whole range (ties everywhere) on head 0 of token 3.
    arguments["key"][3, 0] = torch.arange(head_dim, dtype=F32) - 128.5
    expected = {name: arguments[name].clone() for name in ("key_cache", "value_cache")}
    cache_reference.reshape_and_cache(**{**arguments, "key_cache": expected["key_cache"],
                                         "value_cache": expected["value_cache"]})
    key_before, value_before = arguments["key"].clone(), arguments["value"].clone()
    kernel(arguments["key"], arguments["value"], arguments["key_cache"], arguments["value_cache"],
           arguments["slot_mapping"].to(torch.int64), arguments["k_scale"], arguments["v_scale"], isa)
    assert torch.equal(arguments["key_cache"], expected["key_cache"])
    assert torch.equal(arguments["value_cache"], expected["value_cache"])
    assert torch.equal(torch.nan_to_num(arguments["key"]), torch.nan_to_num(key_before))
    assert torch.equal(arguments["value"], value_before)


def test_cache_write_rejects_an_unknown_isa(gen):
    kernel = cpu_kernel_or_skip(cpu_write_kernel)
    arguments = cache_write_call(Draw(gen), tokens=2, hkv=1, head_dim=8, block_size=4, num_blocks=2, dtype=F32,
                                 cache_dtype=INT8)
    before = arguments["key_cache"].clone()
    with pytest.raises(RuntimeError, match="argument 'isa' must be one of"):
        kernel(arguments["key"], arguments["value"], arguments["key_cache"], arguments["value_cache"],
               arguments["slot_mapping"].to(torch.int64), arguments["k_scale"], arguments["v_scale"], "avx9000")
    assert torch.equal(arguments["key_cache"], before)
