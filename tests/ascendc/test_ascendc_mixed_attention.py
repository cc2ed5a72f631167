"""mixed_attention on Ascend C (one mixed cube + vector launch) against the torch reference.

Through ``qwen_ops.ops`` with ``backend="ascendc"``, on the stand-in: decode
rows (part 1's vector path on the AIVs) followed by prefill chunks (the cube
path) in one launch; decode-only, prefill-only and mixed batches, int8 and
float caches, GQA ratios 1 to 8, head dims 64/128/256, key tiles spanning
several cache blocks, bad input rejected as on the torch backend with
nothing written.

Tolerance: KERNEL_VS_REFERENCE for the query's dtype, for the reasons given
in test_ascendc_prefill_attention.py (prefill rows: operands in the query's
dtype, float32 accumulation, P rounded to the query's dtype) and
test_ascendc_kernels.py (decode rows: float32 throughout).
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


def _inputs(gen, dtype, cache_dtype, hq, hkv, d, bs, decode_lens, prefill):
    """A mixed batch: decodes with ``decode_lens`` cached tokens (their new token already in the cache),
    then prefill chunks ``prefill`` = [(q_len, context)]; a paged cache of distinct random blocks
    (table entries past each request's need are -1) and, for int8, absmax-calibrated scales."""
    q_lens = [1] * len(decode_lens) + [q for q, _ in prefill]
    seq_lens = list(decode_lens) + [q + c for q, c in prefill]
    cached = list(decode_lens) + [c for _, c in prefill]
    t = sum(q_lens)
    need = [-(-n // bs) for n in cached]
    nb = max(1, sum(need))
    ids = torch.randperm(nb, generator=gen).tolist()
    tables = torch.full((len(q_lens), max(need, default=0) + 1), -1, dtype=torch.int32)
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
    starts = torch.tensor([0] + torch.tensor(q_lens, dtype=torch.int64).cumsum(0).tolist(), dtype=torch.int32)
    return dict(query=torch.randn(t, hq, d, generator=gen).to(dtype),
                key=torch.randn(t, hkv, d, generator=gen).to(dtype),
                value=torch.randn(t, hkv, d, generator=gen).to(dtype), key_cache=kc, value_cache=vc,
                block_tables=tables, query_start_loc=starts, seq_lens=torch.tensor(seq_lens, dtype=torch.int32),
                num_decodes=len(decode_lens), k_scale=ks, v_scale=vs)


def _compare(dtype, scale=None, **inputs):
    want = ops.mixed_attention(**inputs, scale=scale, backend="torch")
    got = ops.mixed_attention(**inputs, scale=scale, backend="ascendc")
    assert got.shape == want.shape and got.dtype == want.dtype
    assert bool(torch.isfinite(got).all())
    torch.testing.assert_close(got.float(), want.float(), **tol(KERNEL_VS_REFERENCE, dtype))
    return got


# (query dtype, cache dtype, Hq, Hkv, D, Bs, decode cached lengths, prefill [(q_len, context)]): why.
CASES = [
    pytest.param(FP16, FP16, 4, 2, 64, 16, [5, 17, 1], [], id="fp16-decode-only"),
    pytest.param(FP16, FP16, 4, 2, 64, 16, [], [(9, 0), (4, 20)], id="fp16-prefill-only"),
    pytest.param(FP16, FP16, 4, 2, 64, 16, [7, 33], [(12, 5), (1, 1), (0, 3), (6, 0)], id="fp16-mixed"),
    pytest.param(FP32, FP32, 2, 1, 64, 16, [3], [(5, 18)], id="fp32-mixed-group2"),
    pytest.param(BF16, BF16, 4, 2, 128, 16, [40, 2], [(11, 30)], id="bf16-mixed-d128"),
    pytest.param(FP16, INT8, 6, 2, 64, 16, [19, 4], [(8, 25), (3, 0)], id="int8-fp16-group3"),
    pytest.param(BF16, INT8, 4, 1, 128, 16, [9], [(7, 40)], id="int8-bf16-group4"),
    pytest.param(FP32, INT8, 4, 2, 64, 16, [12, 1], [(4, 9)], id="int8-fp32"),
    pytest.param(FP16, FP16, 2, 2, 256, 16, [13], [(5, 12)], id="fp16-d256-mha"),
    pytest.param(FP32, FP32, 4, 2, 256, 16, [6], [(3, 20)], id="fp32-d256"),
    pytest.param(FP16, INT8, 8, 1, 128, 64, [70, 3], [(6, 65)], id="int8-fp16-group8-bs64"),
    pytest.param(FP16, FP16, 4, 4, 64, 5, [23, 2], [(9, 13)], id="fp16-bs5-mha"),
]


@pytest.mark.parametrize("dtype, cache_dtype, hq, hkv, d, bs, decode_lens, prefill", CASES)
def test_mixed_cases(gen, dtype, cache_dtype, hq, hkv, d, bs, decode_lens, prefill):
    _compare(dtype, **_inputs(gen, dtype, cache_dtype, hq, hkv, d, bs, decode_lens, prefill))


@pytest.mark.parametrize("group", [1, 2, 4, 8])
@pytest.mark.parametrize("cache_dtype", [FP16, INT8], ids=["fp16-cache", "int8-cache"])
def test_mixed_gqa_ratios(gen, group, cache_dtype):
    _compare(FP16, **_inputs(gen, FP16, cache_dtype, 2 * group, 2, 64, 16, [21, 6], [(13, 4)]))


@pytest.mark.parametrize("dtype, cache_dtype", [(FP16, FP16), (FP16, INT8), (FP32, FP32)],
                         ids=["fp16", "int8-fp16", "fp32"])
def test_mixed_long_block_spanning_tiles(gen, dtype, cache_dtype):
    """Prefill key tiles of 48 keys over blocks of 16 (spanning blocks, starting mid-block), several key and
    query tiles per unit; more decode units than the 4 AIVs and more prefill units than the 2 groups."""
    inputs = _inputs(gen, dtype, cache_dtype, 4, 2, 64, 16, [90, 5, 33, 61, 17], [(70, 100), (37, 61)])
    with ab.launch_config(num_cores=4, max_tile=48):
        _compare(dtype, **inputs)
        tiling = ab.last_launch()["tiling"]
    assert tiling["kv_tile_tokens"] == 48 and tiling["used_cores"] == 2
    assert tiling["num_decodes"] == 5 and tiling["decode_used_cores"] == 4


def test_mixed_one_group_explicit_scale(gen):
    """Everything on one group (one AIC, two AIVs) with an explicit scale: decodes, then the ring wraps."""
    inputs = _inputs(gen, FP16, FP16, 4, 2, 64, 16, [9, 30, 2], [(17, 9), (1, 0)])
    with ab.launch_config(num_cores=1, max_tile=16):
        _compare(FP16, scale=0.2, **inputs)


@pytest.mark.parametrize("d", [40, 512])
def test_mixed_unsupported_head_dim_is_refused(gen, d):
    inputs = _inputs(gen, FP16, FP16, 2, 1, d, 16, [3], [(2, 4)])
    with pytest.raises(_backend.BackendError, match=f"multiple of 16 and at most 256, got {d}"):
        ops.mixed_attention(**inputs, backend="ascendc")


BAD = [
    ("block table entry out of range", lambda i: i["block_tables"].__setitem__((0, 0), 10_000), ValueError),
    ("decode with two rows", lambda i: i["query_start_loc"].__setitem__(1, 2), ValueError),
    ("seq_lens below the chunk", lambda i: i["seq_lens"].__setitem__(2, 1), ValueError),
    ("num_decodes past N", lambda i: i.__setitem__("num_decodes", 9), ValueError),
    ("key of another dtype", lambda i: i.__setitem__("key", i["key"].float()), TypeError),
    ("v_scale missing for int8", lambda i: i.__setitem__("v_scale", None), ValueError),
]


@pytest.mark.parametrize("what, breaks, error", BAD, ids=[b[0] for b in BAD])
def test_mixed_bad_input_same_error_as_torch_and_nothing_written(gen, what, breaks, error):
    inputs = _inputs(gen, FP16, INT8, 4, 2, 64, 16, [9, 2], [(5, 3)])
    breaks(inputs)
    before = {k: v.clone() for k, v in inputs.items() if isinstance(v, torch.Tensor)}
    messages = []
    for backend in ("torch", "ascendc"):
        with pytest.raises(error) as info:
            ops.mixed_attention(**inputs, backend=backend)
        messages.append(str(info.value))
    assert messages[0] == messages[1]
    for k, v in before.items():
        assert torch.equal(inputs[k], v), f"'{k}' was written"
