"""The batched CPU attention forms against the references they stand in for.

``ops/attention/vectorized_decode.py``, ``vectorized_prefill.py`` and
``vectorized_mixed.py`` are what ``backend="torch"`` runs on CPU tensors (so
tests/ops/test_attention_reference.py checks them against float64 loops
through the public ops); here they are called side by side with the readable
references on the same calls from the case registry (``qwen_ops.testing``):
float and INT8 caches, grouped query heads, unequal lengths (zero included),
block-table columns past a request's blocks holding -1 or a stale block id,
cached context, causal and not, low-precision queries, and tiles smaller than
the batch (the tile sizes are shrunk so that several tiles run).
"""
from __future__ import annotations

import pytest
import torch
from cpu_kernel_paths import cpu_kernel_or_skip, kernel_or_torch_path
from tolerances import VECTORIZED_VS_REFERENCE, tol

from qwen_ops.ops._backend import resolve
from qwen_ops.ops.attention import cpu_decode_kernel, reference, vectorized_decode, vectorized_mixed, vectorized_prefill
from qwen_ops.testing import Draw, decode_call, mixed_call, prefill_call

F32, BF16, INT8 = torch.float32, torch.bfloat16, torch.int8
CACHE_DTYPES = [F32, INT8]


@pytest.fixture(params=["kernel", "torch"])
def decode_path(request, monkeypatch):
    """Run the decode form through the C++ kernel, and again with it hidden (the torch form's path)."""
    return kernel_or_torch_path(request, monkeypatch, cpu_decode_kernel)


def _assert_same(reference_fn, vectorized_fn, arguments, dtype=F32):
    before = {name: value.clone() for name, value in arguments.items() if torch.is_tensor(value)}
    expected = reference_fn(**arguments)
    got = vectorized_fn(**arguments)
    assert got.dtype == expected.dtype and got.shape == expected.shape
    torch.testing.assert_close(got, expected, **tol(VECTORIZED_VS_REFERENCE, dtype))
    for name, value in before.items():
        assert torch.equal(arguments[name], value), f"{name} was modified"


@pytest.mark.parametrize("cache_dtype", CACHE_DTYPES)
@pytest.mark.parametrize("hq,hkv", [(8, 2), (4, 4)])
@pytest.mark.parametrize("tile_bytes", [vectorized_decode.TILE_BYTES, 1])
def test_decode_matches_reference(gen, monkeypatch, cache_dtype, hq, hkv, tile_bytes, decode_path):
    monkeypatch.setattr(vectorized_decode, "TILE_BYTES", tile_bytes)  # 1: one request per tile
    arguments = decode_call(Draw(gen), F32, cache_dtype, hq, hkv, 32, 16, [5, 0, 33, 17, 1, 48], width=6)
    arguments["scale"] = 32 ** -0.5
    _assert_same(reference.paged_decode_attention, vectorized_decode.paged_decode_attention, arguments)


def test_decode_reads_nothing_past_a_requests_blocks(gen, decode_path):
    arguments = decode_call(Draw(gen), F32, F32, 4, 2, 16, 8, [3, 20, 9], width=5, spare_blocks=2)
    tables = arguments["block_tables"]
    tables[tables < 0] = arguments["key_cache"].shape[0] - 1  # stale ids of a block no request owns
    arguments["scale"] = 0.25
    _assert_same(reference.paged_decode_attention, vectorized_decode.paged_decode_attention, arguments)


def test_decode_all_empty_and_bfloat16(gen, decode_path):
    arguments = decode_call(Draw(gen), BF16, BF16, 4, 1, 16, 8, [0, 0])
    arguments["scale"] = 0.25
    out = vectorized_decode.paged_decode_attention(**arguments)
    assert torch.equal(out, torch.zeros_like(out))
    arguments = decode_call(Draw(gen), BF16, INT8, 4, 1, 16, 8, [7, 0, 30])
    arguments["scale"] = 0.25
    _assert_same(reference.paged_decode_attention, vectorized_decode.paged_decode_attention, arguments, BF16)


@pytest.mark.parametrize("cache_dtype", CACHE_DTYPES)
@pytest.mark.parametrize("causal", [True, False])
def test_prefill_with_context_matches_reference(gen, monkeypatch, cache_dtype, causal):
    monkeypatch.setattr(vectorized_prefill, "QUERY_TILE", 16)  # several tiles, a partial last one
    arguments = prefill_call(Draw(gen), F32, cache_dtype, 8, 2, 32, 16, [70, 0, 3, 40], [0, 5, 40, 17])
    arguments.update(scale=32 ** -0.5, causal=causal)
    _assert_same(reference.prefill_attention, vectorized_prefill.prefill_attention, arguments)


@pytest.mark.parametrize("dtype", [F32, BF16])
def test_prefill_without_cache_matches_reference(gen, dtype):
    arguments = prefill_call(Draw(gen), dtype, dtype, 4, 2, 16, 8, [90, 1, 0, 7])
    arguments["scale"] = 0.25
    _assert_same(reference.prefill_attention, vectorized_prefill.prefill_attention, arguments, dtype)


@pytest.mark.parametrize("cache_dtype", CACHE_DTYPES)
def test_mixed_matches_reference(gen, cache_dtype, decode_path):
    arguments = mixed_call(Draw(gen), F32, cache_dtype, 8, 2, 32, 16, [1, 1, 1, 5, 70, 0], [9, 0, 30, 12, 100, 4], 3)
    arguments["scale"] = 32 ** -0.5
    _assert_same(reference.mixed_attention, vectorized_mixed.mixed_attention, arguments)


@pytest.mark.parametrize("d", [32, 20])  # 20: the kernel's dot products have a tail past their 16 lanes
def test_decode_kernel_long_context_unequal_lengths(gen, d):
    cpu_kernel_or_skip(cpu_decode_kernel)  # many blocks per request: the online softmax rescales many times
    arguments = decode_call(Draw(gen), F32, F32, 8, 2, d, 16, [300, 1, 17, 256], width=20)
    arguments["scale"] = d ** -0.5
    arguments["query"] *= 4.0  # sharp softmaxes: a wrong running max would show
    _assert_same(reference.paged_decode_attention, vectorized_decode.paged_decode_attention, arguments)


def test_decode_kernel_rejects_bad_input_and_writes_nothing(gen):
    kernel = cpu_kernel_or_skip(cpu_decode_kernel)
    arguments = decode_call(Draw(gen), F32, INT8, 4, 2, 16, 8, [3, 9], width=2)
    q, kc, vc = arguments["query"], arguments["key_cache"], arguments["value_cache"]
    ks, vs = arguments["k_scale"], arguments["v_scale"]
    tables, lens = arguments["block_tables"].clone(), arguments["seq_lens"]
    out = torch.full_like(q, 7.0)
    bad_tables = tables.clone()
    bad_tables[1, 1] = kc.shape[0]
    with pytest.raises(RuntimeError, match=r"block_tables\[1, 1\] = .* is outside the cache's"):
        kernel(q, kc, vc, bad_tables, lens, 0.25, ks, vs, out)
    with pytest.raises(RuntimeError, match=r"seq_lens\[1\] = 17 is outside \[0, M \* Bs\] = \[0, 16\]"):
        kernel(q, kc, vc, tables, torch.tensor([3, 17], dtype=torch.int32), 0.25, ks, vs, out)
    with pytest.raises(RuntimeError, match="k_scale must be a contiguous float32"):
        kernel(q, kc, vc, tables, lens, 0.25, None, vs, out)
    with pytest.raises(RuntimeError, match="query must be a contiguous float32"):
        kernel(q.double(), kc, vc, tables, lens, 0.25, ks, vs, out)
    with pytest.raises(RuntimeError, match="block_tables must be a contiguous int32"):
        kernel(q, kc, vc, tables.long(), lens, 0.25, ks, vs, out)
    with pytest.raises(RuntimeError, match="key_cache must be a contiguous float32, int8 or bfloat16"):
        kernel(q, kc.double(), vc, tables, lens, 0.25, ks, vs, out)
    assert torch.equal(out, torch.full_like(q, 7.0))


def test_torch_backend_runs_the_batched_attention_on_cpu():
    cpu = torch.device("cpu")
    assert resolve("paged_decode_attention", "torch", cpu) is vectorized_decode.paged_decode_attention
    assert resolve("prefill_attention", "torch", cpu) is vectorized_prefill.prefill_attention
    assert resolve("mixed_attention", "torch", cpu) is vectorized_mixed.mixed_attention
