"""prefill_attention on Ascend C (the mixed cube + vector kernel) against the torch reference.

Through ``qwen_ops.ops`` with ``backend="ascendc"``, on the stand-in: the
foundation's prefill edge cases, long sequences with several cache blocks per
key tile and several tiles per unit, int8 and float caches, GQA ratios 1 to 8,
head dims 64/128/256, bad input rejected as on the torch backend with nothing
written, and the tiling's unified-buffer plan against the measured high-water
mark.

Tolerance: KERNEL_VS_REFERENCE for the query's dtype. The cube multiplies
operands in the query's dtype with float32 accumulation (exact products,
float32 sums, as the stand-in models it); P is rounded to the query's dtype
before P.V (as FlashAttention kernels on Ascend do) and int8 context is
dequantised to it (k * scale in float32, then one rounding); the softmax is
float32. So float32 inputs match to float32 rounding, float16 to a couple of
half ulps of the output (measured max |diff| ~2e-3 at values ~1) and bfloat16
to a couple of bfloat16 ulps.
"""
from __future__ import annotations

import pytest
import torch

import qwen_ops.ops as ops
from qwen_ops.ops import _backend

from tolerances import KERNEL_VS_REFERENCE, tol

if "ascendc" not in _backend.available_backends():  # pragma: no cover - the extension is part of the build
    pytest.skip("qwen_ops._C was built without the Ascend C kernels", allow_module_level=True)

from qwen_ops.ops import ascendc_backend as ab  # noqa: E402

FP16, FP32, BF16, INT8 = torch.float16, torch.float32, torch.bfloat16, torch.int8
UB_USABLE = 184 * 1024


def _offsets(lengths):
    return torch.tensor([0] + torch.tensor(lengths, dtype=torch.int64).cumsum(0).tolist(), dtype=torch.int32)


def _inputs(gen, dtype, cache_dtype, hq, hkv, d, bs, q_lens, context_lens):
    """TND query/key/value; with context_lens a paged cache of distinct random blocks (entries past
    each request's need are -1) and, for int8, absmax-calibrated scales."""
    t = sum(q_lens)
    inputs = dict(query=torch.randn(t, hq, d, generator=gen).to(dtype),
                  key=torch.randn(t, hkv, d, generator=gen).to(dtype),
                  value=torch.randn(t, hkv, d, generator=gen).to(dtype), cu_seqlens_q=_offsets(q_lens))
    if context_lens is None:
        return inputs
    need = [-(-n // bs) for n in context_lens]
    nb = max(1, sum(need))
    ids = torch.randperm(nb, generator=gen).tolist()
    tables = torch.full((len(context_lens), max(need) + 1), -1, dtype=torch.int32)
    for r, k in enumerate(need):
        tables[r, :k] = torch.tensor(ids[:k], dtype=torch.int32)
        ids = ids[k:]
    shape = (nb, hkv, bs, d)
    k, v = torch.randn(shape, generator=gen), torch.randn(shape, generator=gen)
    if cache_dtype == INT8:
        token_major = (k.transpose(1, 2), v.transpose(1, 2))
        ks, vs = (ops.kv_scales_from_absmax(x) for x in token_major)
        kc, vc = (ops.quantize_int8(x, s).transpose(1, 2).contiguous() for x, s in zip(token_major, (ks, vs)))
    else:
        kc, vc, ks, vs = k.to(cache_dtype), v.to(cache_dtype), None, None
    inputs.update(key_cache=kc, value_cache=vc, block_tables=tables,
                  context_lens=torch.tensor(context_lens, dtype=torch.int32), k_scale=ks, v_scale=vs)
    return inputs


def _compare(dtype, causal=True, scale=None, **inputs):
    want = ops.prefill_attention(**inputs, causal=causal, scale=scale, backend="torch")
    got = ops.prefill_attention(**inputs, causal=causal, scale=scale, backend="ascendc")
    assert got.shape == want.shape and got.dtype == want.dtype
    assert bool(torch.isfinite(got).all())
    torch.testing.assert_close(got.float(), want.float(), **tol(KERNEL_VS_REFERENCE, dtype))
    return got


# (query dtype, cache dtype or None, Hq, Hkv, D, Bs, q_lens, context_lens or None, causal): why.
EDGE_CASES = [
    # No cache; an empty request; a partial query tile.
    pytest.param(FP16, None, 4, 2, 64, 16, [20, 0, 5], None, True, id="fp16-nocontext"),
    pytest.param(FP16, None, 4, 2, 64, 16, [20, 0, 5], None, False, id="fp16-noncausal"),
    # Paged float context of 0, 1, 7 and 18 tokens; requests with context but no new tokens first and
    # last; a one-token chunk over a one-token context (the cube's m = 1 padded to 2).
    pytest.param(FP32, FP32, 2, 1, 64, 16, [0, 9, 4, 1, 3, 0], [5, 7, 0, 1, 18, 2], True, id="fp32-context"),
    # INT8 context with a group of 3 (dequantised on the AIVs).
    pytest.param(FP16, INT8, 6, 2, 64, 16, [11, 2], [19, 33], True, id="int8-fp16-group3"),
    pytest.param(FP32, INT8, 4, 2, 64, 16, [6, 10], [17, 5], False, id="int8-fp32-noncausal"),
    pytest.param(BF16, INT8, 4, 1, 128, 16, [9, 4], [40, 0], True, id="int8-bf16-group4"),
    # Head dims 64/128/256 in every dtype.
    pytest.param(FP16, FP16, 2, 2, 256, 16, [5, 3], [12, 0], True, id="fp16-d256-mha"),
    pytest.param(FP32, FP32, 4, 2, 256, 16, [7, 2], [20, 3], True, id="fp32-d256"),
    pytest.param(BF16, BF16, 4, 2, 256, 16, [6], [17], True, id="bf16-d256"),
    pytest.param(BF16, BF16, 16, 2, 128, 16, [40, 3], [70, 0], True, id="bf16-d128-group8"),
    pytest.param(FP16, INT8, 8, 1, 128, 64, [7, 1], [65, 3], True, id="int8-fp16-group8-bs64-d128"),
    # Bs = 128: the context of one request sits in one block, the other spans two.
    pytest.param(FP16, FP16, 4, 2, 64, 128, [4, 6], [140, 9], True, id="fp16-bs128"),
    # Odd block size: tiles cut blocks at every offset.
    pytest.param(FP16, FP16, 4, 4, 64, 5, [9, 13], [23, 7], True, id="fp16-bs5-mha"),
]


@pytest.mark.parametrize("dtype, cache_dtype, hq, hkv, d, bs, q_lens, context_lens, causal", EDGE_CASES)
def test_prefill_edge_cases(gen, dtype, cache_dtype, hq, hkv, d, bs, q_lens, context_lens, causal):
    _compare(dtype, causal=causal, **_inputs(gen, dtype, cache_dtype, hq, hkv, d, bs, q_lens, context_lens))


@pytest.mark.parametrize("group", [1, 2, 3, 4, 8])
@pytest.mark.parametrize("cache_dtype", [FP16, INT8], ids=["fp16-cache", "int8-cache"])
def test_prefill_gqa_ratios(gen, group, cache_dtype):
    _compare(FP16, **_inputs(gen, FP16, cache_dtype, 2 * group, 2, 64, 16, [13, 6], [21, 4]))


@pytest.mark.parametrize("dtype, cache_dtype", [(FP16, FP16), (FP16, INT8), (FP32, FP32), (BF16, INT8)],
                         ids=["fp16", "int8-fp16", "fp32", "int8-bf16"])
def test_prefill_long_sequences_many_tiles(gen, dtype, cache_dtype):
    """Long context and chunk: key tiles of 48 keys over blocks of 16 (each tile spans several blocks and
    starts mid-block), several key tiles and query tiles per unit, more units than the 2 groups."""
    inputs = _inputs(gen, dtype, cache_dtype, 4, 2, 64, 16, [150, 37], [230, 61])
    with ab.launch_config(num_cores=4, max_tile=48):
        _compare(dtype, **inputs)
        tiling = ab.last_launch()["tiling"]
    assert tiling["kv_tile_tokens"] == 48 and tiling["used_cores"] == 2


def test_prefill_explicit_scale_and_one_group(gen):
    """An explicit scale, everything on one group (one AIC, two AIVs): the ring wraps many times."""
    inputs = _inputs(gen, FP16, FP16, 4, 2, 64, 16, [33, 1, 17], [40, 0, 9])
    with ab.launch_config(num_cores=1, max_tile=16):
        _compare(FP16, scale=0.2, **inputs)


def test_prefill_no_tokens(gen):
    inputs = _inputs(gen, FP32, None, 2, 1, 64, 16, [0, 0], None)
    assert ops.prefill_attention(**inputs, backend="ascendc").shape == (0, 2, 64)


def test_prefill_tiling_fills_the_unified_buffer_as_planned(gen):
    """The planner's unified-buffer bytes are what each AIV asked TPipe for (measured), within 184 KB."""
    inputs = _inputs(gen, FP16, INT8, 8, 1, 256, 16, [20], [40])
    _compare(FP16, **inputs)
    launch = ab.last_launch()
    assert launch["ub_high_water"] == launch["tiling"]["ub_planned"] <= UB_USABLE
    assert launch["tiling"]["l0a"] <= 64 * 1024 and launch["tiling"]["l0b"] <= 64 * 1024
    assert launch["tiling"]["l0c"] <= 128 * 1024 and launch["tiling"]["l1_planned"] <= 512 * 1024


def test_prefill_smaller_budget_gives_smaller_tiles(gen):
    inputs = _inputs(gen, FP16, FP16, 4, 2, 128, 16, [30], [25])
    with ab.launch_config(ub_bytes=48 * 1024):
        _compare(FP16, **inputs)
        launch = ab.last_launch()
    assert launch["ub_high_water"] == launch["tiling"]["ub_planned"] <= 48 * 1024


@pytest.mark.parametrize("d", [40, 512])
def test_prefill_unsupported_head_dim_is_refused(gen, d):
    inputs = _inputs(gen, FP16, FP16, 2, 1, d, 16, [3], [4])
    with pytest.raises(_backend.BackendError, match=f"multiple of 16 and at most 256, got {d}"):
        ops.prefill_attention(**inputs, backend="ascendc")


BAD = [
    ("block table entry out of range", lambda i: i["block_tables"].__setitem__((0, 0), 10_000), ValueError),
    ("context_lens negative", lambda i: i["context_lens"].__setitem__(0, -1), ValueError),
    ("cu_seqlens_q past T", lambda i: i["cu_seqlens_q"].__setitem__(1, 9), ValueError),
    ("key of another dtype", lambda i: i.__setitem__("key", i["key"].float()), TypeError),
    ("k_scale missing for int8", lambda i: i.__setitem__("k_scale", None), ValueError),
]


@pytest.mark.parametrize("what, breaks, error", BAD, ids=[b[0] for b in BAD])
def test_prefill_bad_input_same_error_as_torch_and_nothing_written(gen, what, breaks, error):
    inputs = _inputs(gen, FP16, INT8, 4, 2, 64, 16, [5, 3], [9, 2])
    breaks(inputs)
    before = {k: v.clone() for k, v in inputs.items() if isinstance(v, torch.Tensor)}
    messages = []
    for backend in ("torch", "ascendc"):
        with pytest.raises(error) as info:
            ops.prefill_attention(**inputs, backend=backend)
        messages.append(str(info.value))
    assert messages[0] == messages[1]
    for k, v in before.items():
        assert torch.equal(inputs[k], v), f"'{k}' was written"
