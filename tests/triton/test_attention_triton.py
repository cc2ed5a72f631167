"""Triton attention kernels against the torch reference.

``paged_decode_attention``, ``prefill_attention`` and ``mixed_attention`` with
``backend="triton"`` vs ``backend="torch"``, within
``KERNEL_VS_REFERENCE``. On a CPU-only machine the kernels run under Triton's
interpreter (``TRITON_INTERPRET=1``, set by ``tests/conftest.py``), where
every tile op is a numpy call: shapes are therefore small (D = 64 and two or
four heads unless a case is about D or the GQA group; a handful of tokens,
enough for several column tiles of 16 and several row blocks). The reason for
each shape is given beside it. On a GPU machine the same tests run compiled
on CUDA tensors, and the bf16 cases run too.
"""
import os

import pytest
import torch

from qwen_ops import ops
from qwen_ops.ops._triton import ASCEND_UB_BYTES
from qwen_ops.ops.attention import triton_common, triton_decode
from qwen_ops.testing import Draw, decode_call, mixed_call, paged_cache, prefill_call
from tolerances import KERNEL_VS_REFERENCE, tol

INTERPRETING = os.environ.get("TRITON_INTERPRET") == "1"
DEVICE = torch.device("cuda" if torch.cuda.is_available() and not INTERPRETING else "cpu")
NEEDS_GPU = pytest.mark.skipif(DEVICE.type != "cuda",
                               reason="bf16 tl.dot is wrong under the Triton interpreter; runs on a GPU/NPU only")
FP16, FP32, BF16, INT8 = torch.float16, torch.float32, torch.bfloat16, torch.int8


# ----------------------------------------------------------------------------- builders
# Inputs come from the shared case registry (qwen_ops.testing): block tables with -1 past each
# request's blocks (a kernel reading them would fail), int8 caches quantized with calibrated scales.


def _compare(op, dtype, **kwargs):
    """Run ``op`` with both backends on DEVICE; assert the kernel matches the reference."""
    moved = {k: v.to(DEVICE) if isinstance(v, torch.Tensor) else v for k, v in kwargs.items()}
    ref = op(**moved, backend="torch")
    out = op(**moved, backend="triton")
    assert out.shape == ref.shape and out.dtype == ref.dtype
    assert bool(torch.isfinite(out).all())
    torch.testing.assert_close(out.cpu().float(), ref.cpu().float(), **tol(KERNEL_VS_REFERENCE, dtype))
    return out


# ----------------------------------------------------------------------------- decode

# (query dtype, cache dtype, Hq, Hkv, D, Bs, seq_lens, max blocks): why.
DECODE_CASES = [
    # GQA group of 2, an empty request (zeros), one ending exactly on a block edge, one of one token.
    pytest.param(FP16, FP16, 4, 2, 64, 16, [37, 0, 16, 1], 3, id="fp16-gqa2-edges"),
    # One long request, one KV head: few items, so the host splits the sequence (flash-decoding).
    pytest.param(FP32, FP32, 2, 1, 64, 16, [70], 5, id="fp32-split"),
    # INT8 cache with a group of 3 (not a power of two: padded, masked rows).
    pytest.param(FP16, INT8, 6, 2, 64, 16, [25, 40], 3, id="int8-fp16-group3"),
    # INT8 cache through the split path.
    pytest.param(FP32, INT8, 4, 1, 64, 16, [50], 4, id="int8-fp32-split"),
    # D = 256 with MHA (group 1), tiles straddling blocks.
    pytest.param(FP16, FP16, 2, 2, 256, 16, [20, 9], 2, id="fp16-d256-mha"),
    # Bs = 128: a tile of 16 positions inside a block, lengths past one block.
    pytest.param(FP16, FP16, 2, 1, 64, 128, [130, 3], 2, id="fp16-bs128"),
    # Bs = 64, D = 128, group of 8 (Qwen3.5's attention layout, fewer heads).
    pytest.param(FP16, FP16, 8, 1, 128, 64, [70, 33], 2, id="fp16-bs64-d128-group8"),
]


@pytest.mark.parametrize("dtype, cache_dtype, hq, hkv, d, bs, seq_lens, max_blocks", DECODE_CASES)
def test_decode(gen, dtype, cache_dtype, hq, hkv, d, bs, seq_lens, max_blocks):
    inputs = decode_call(Draw(gen), dtype, cache_dtype, hq, hkv, d, bs, seq_lens, max_blocks)
    out = _compare(ops.paged_decode_attention, dtype, **inputs)
    for r, n in enumerate(seq_lens):
        if n == 0:
            assert bool((out[r] == 0).all())


def test_decode_cases_cover_both_paths():
    """The premise of DECODE_CASES: under the interpreter's grid some cases split and some don't."""
    splits = {
        triton_decode.choose_splits(DEVICE, len(p.values[6]), p.values[3], p.values[7] * p.values[5])[0]
        for p in DECODE_CASES
    }
    if INTERPRETING:
        assert 1 in splits and max(splits) > 1


def test_decode_strided_query_and_scale(gen):
    """A non-contiguous query (a slice of a fused projection) and an explicit softmax scale."""
    inputs = decode_call(Draw(gen), FP32, FP32, 4, 2, 64, 16, [21, 5], 2)
    fused = torch.randn(2, 4, 3 * 64, generator=gen)
    inputs["query"] = fused[:, :, 64:128]
    assert not inputs["query"].is_contiguous()
    _compare(ops.paged_decode_attention, FP32, scale=0.3, **inputs)


def test_choose_splits_covers_every_position():
    device = torch.device("cpu") if INTERPRETING else DEVICE
    for requests, heads, max_tokens in [(1, 1, 70), (1, 1, 1), (2, 4, 4096), (64, 8, 128), (1, 2, 10 ** 6)]:
        splits, split_len = triton_decode.choose_splits(device, requests, heads, max_tokens)
        assert 1 <= splits <= triton_decode.MAX_SPLITS
        assert splits * split_len >= max_tokens > (splits - 1) * split_len


@pytest.mark.gpu
@NEEDS_GPU
@pytest.mark.parametrize("cache_dtype", [BF16, INT8])
def test_decode_bf16(gen, cache_dtype):
    inputs = decode_call(Draw(gen), BF16, cache_dtype, 16, 2, 256, 64, [1000, 1, 0, 300], 16)
    _compare(ops.paged_decode_attention, BF16, **inputs)


# ----------------------------------------------------------------------------- prefill

# (query dtype, cache dtype or None, Hq, Hkv, D, Bs, q_lens, context_lens or None, causal): why.
PREFILL_CASES = [
    # No cache; 20 new tokens = 3 row blocks of 8 tokens (group 2 in 16 rows); an empty request.
    pytest.param(FP16, None, 4, 2, 64, 16, [20, 0, 5], None, True, id="fp16-nocontext"),
    pytest.param(FP16, None, 4, 2, 64, 16, [20, 0, 5], None, False, id="fp16-noncausal"),
    # Paged float context of 0, 1, 7 and 18 tokens (crossing a block edge); requests with
    # no new tokens (but context) first and last; a one-token chunk over a one-token context.
    pytest.param(FP32, FP32, 2, 1, 64, 16, [0, 9, 4, 1, 3, 0], [5, 7, 0, 1, 18, 2], True, id="fp32-context"),
    # INT8 context with a group of 3.
    pytest.param(FP16, INT8, 6, 2, 64, 16, [11, 2], [19, 33], True, id="int8-fp16-group3"),
    # INT8 context, float32, without the causal mask.
    pytest.param(FP32, INT8, 4, 2, 64, 16, [6, 10], [17, 5], False, id="int8-fp32-noncausal"),
    # D = 256 once, MHA, short sequences.
    pytest.param(FP16, FP16, 2, 2, 256, 16, [5, 3], [12, 0], True, id="fp16-d256"),
    # Bs = 128 once: the context of one request sits in one block, the other spans two.
    pytest.param(FP16, FP16, 4, 2, 64, 128, [4, 6], [140, 9], True, id="fp16-bs128"),
    # A group of 8 fills a 16-row tile with two tokens: many row blocks; Bs = 64, D = 128.
    pytest.param(FP16, FP16, 8, 1, 128, 64, [7, 1], [65, 3], True, id="fp16-group8-bs64-d128"),
]


@pytest.mark.parametrize("dtype, cache_dtype, hq, hkv, d, bs, q_lens, context_lens, causal", PREFILL_CASES)
def test_prefill(gen, dtype, cache_dtype, hq, hkv, d, bs, q_lens, context_lens, causal):
    inputs = prefill_call(Draw(gen), dtype, cache_dtype, hq, hkv, d, bs, q_lens, context_lens)
    _compare(ops.prefill_attention, dtype, causal=causal, **inputs)


def test_prefill_strided_qkv_and_scale(gen):
    """q, k, v as views of one fused QKV projection [T, Hq + 2 Hkv, D], with an explicit scale."""
    q_lens, hq, hkv, d = [9, 4], 4, 2, 64
    qkv = torch.randn(sum(q_lens), hq + 2 * hkv, d, generator=gen).to(FP16)
    inputs = prefill_call(Draw(gen), FP16, FP16, hq, hkv, d, 16, q_lens, [10, 3])
    inputs.update(query=qkv[:, :hq], key=qkv[:, hq:hq + hkv], value=qkv[:, hq + hkv:])
    _compare(ops.prefill_attention, FP16, scale=0.2, **inputs)


def test_prefill_no_tokens(gen):
    inputs = prefill_call(Draw(gen), FP32, None, 2, 1, 64, 16, [0, 0], None)
    assert _compare(ops.prefill_attention, FP32, **inputs).shape == (0, 2, 64)


@pytest.mark.gpu
@NEEDS_GPU
@pytest.mark.parametrize("cache_dtype", [BF16, INT8])
def test_prefill_bf16(gen, cache_dtype):
    inputs = prefill_call(Draw(gen), BF16, cache_dtype, 16, 2, 256, 64, [300, 1, 77], [0, 500, 64])
    _compare(ops.prefill_attention, BF16, **inputs)


# ----------------------------------------------------------------------------- mixed

# (query dtype, cache dtype, Hq, Hkv, D, Bs, q_lens, seq_lens, num_decodes): why.
MIXED_CASES = [
    # Two decodes, then prefills: one with context crossing blocks, an empty one, one without context.
    pytest.param(FP16, FP16, 4, 2, 64, 16, [1, 1, 12, 0, 5], [30, 1, 27, 9, 5], 2, id="fp16-mixed"),
    # INT8 cache, group of 3, float32.
    pytest.param(FP32, INT8, 6, 2, 64, 16, [1, 9, 3], [40, 20, 3], 1, id="int8-fp32-group3"),
    # Decodes only (one with an empty cache) and prefills only.
    pytest.param(FP16, FP16, 4, 2, 64, 16, [1, 1, 1], [17, 0, 33], 3, id="decodes-only"),
    pytest.param(FP32, FP32, 2, 1, 64, 16, [7, 3], [10, 3], 0, id="prefills-only"),
    # D = 256, Bs = 128, MHA.
    pytest.param(FP16, FP16, 2, 2, 256, 128, [1, 4], [131, 6], 1, id="fp16-d256-bs128"),
]


@pytest.mark.parametrize("dtype, cache_dtype, hq, hkv, d, bs, q_lens, seq_lens, num_decodes", MIXED_CASES)
def test_mixed(gen, dtype, cache_dtype, hq, hkv, d, bs, q_lens, seq_lens, num_decodes):
    inputs = mixed_call(Draw(gen), dtype, cache_dtype, hq, hkv, d, bs, q_lens, seq_lens, num_decodes)
    _compare(ops.mixed_attention, dtype, **inputs)


def test_mixed_is_decode_then_prefill(gen):
    """The contract's equation for the kernels: one mixed launch = decode kernel rows + prefill kernel rows.

    The decode part has 4 (request, KV head) items, more than the
    interpreter's 3 programs, so the decode kernel does not split and runs the
    same loops as the mixed kernel: bit for bit equal under the interpreter
    (on a GPU, autotuning may pick different tiles: equal within tolerance).
    """
    inputs = mixed_call(Draw(gen), FP16, INT8, 4, 2, 64, 16, [1, 1, 6, 3], [20, 0, 25, 3], 2)
    moved = {k: v.to(DEVICE) if isinstance(v, torch.Tensor) else v for k, v in inputs.items()}
    mixed = ops.mixed_attention(**moved, backend="triton")
    qsl, sl, scales = moved["query_start_loc"], moved["seq_lens"], dict(k_scale=moved["k_scale"], v_scale=moved["v_scale"])
    caches = dict(key_cache=moved["key_cache"], value_cache=moved["value_cache"])
    decode = ops.paged_decode_attention(moved["query"][:2], block_tables=moved["block_tables"][:2], seq_lens=sl[:2],
                                        backend="triton", **caches, **scales)
    prefill = ops.prefill_attention(moved["query"][2:], moved["key"][2:], moved["value"][2:], qsl[2:] - 2,
                                    block_tables=moved["block_tables"][2:], context_lens=sl[2:] - (qsl[3:] - qsl[2:-1]),
                                    backend="triton", **caches, **scales)
    both = torch.cat([decode, prefill])
    if INTERPRETING:
        assert torch.equal(mixed, both)
    else:
        torch.testing.assert_close(mixed, both, **tol(KERNEL_VS_REFERENCE, FP16))
    assert not mixed[1].any()  # the decode with an empty cache


def test_empty_batches(gen):
    """No requests at all: every kernel returns an empty [0, Hq, D] without launching."""
    caches = paged_cache(Draw(gen), 1, 1, 16, 64, FP32)
    kc, vc = caches["key_cache"].to(DEVICE), caches["value_cache"].to(DEVICE)
    empty_q, empty_kv = torch.randn(0, 2, 64, device=DEVICE), torch.randn(0, 1, 64, device=DEVICE)
    none, table = (torch.zeros(shape, dtype=torch.int32, device=DEVICE) for shape in ((0,), (0, 1)))
    offsets = [torch.zeros(n, dtype=torch.int32, device=DEVICE) for n in (1, 3)]
    assert ops.paged_decode_attention(empty_q, kc, vc, table, none, backend="triton").shape == (0, 2, 64)
    assert ops.mixed_attention(empty_q, empty_kv, empty_kv, kc, vc, table, offsets[0], none, 0,
                               backend="triton").shape == (0, 2, 64)
    assert ops.prefill_attention(empty_q, empty_kv, empty_kv, offsets[1], backend="triton").shape == (0, 2, 64)


@pytest.mark.gpu
@NEEDS_GPU
@pytest.mark.parametrize("cache_dtype", [BF16, INT8])
def test_mixed_bf16(gen, cache_dtype):
    inputs = mixed_call(Draw(gen), BF16, cache_dtype, 16, 2, 256, 64, [1, 1, 200, 50], [700, 2, 200, 400], 2)
    _compare(ops.mixed_attention, BF16, **inputs)


# ----------------------------------------------------------------------------- host-side choices


@pytest.mark.parametrize("d", [64, 128, 256])
@pytest.mark.parametrize("elem_bytes", [2, 4])
@pytest.mark.parametrize("int8", [False, True])
@pytest.mark.parametrize("group", [1, 8, 16])
def test_ascend_tiles_fit_the_unified_buffer(d, elem_bytes, int8, group):
    """The Ascend configs of the decode and prefill tiles fit two buffers in the 192 KiB UB (D <= 256, G <= 16)."""
    decode_rows = max(16, group)
    for rows in (decode_rows, triton_common.prefill_rows("npu", decode_rows, d, elem_bytes, int8)):
        n = triton_common.ascend_block_n(rows, d, elem_bytes, int8)
        assert 2 * triton_common.ascend_tile_bytes(rows, n, d, elem_bytes, int8) <= ASCEND_UB_BYTES
