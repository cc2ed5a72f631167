"""Benchmarks of the paged KV cache write and the three attention ops.

Qwen3.5 attention layers: 16 query heads, 4 KV heads, head dim 256; block
size 128. Decode batches of 1 to 256 requests with 1k to 32k tokens of
context; prefill chunks of 512 to 8192 tokens with and without cached context;
a mixed step of decodes plus one prefill chunk. Caches in the serving dtype
and in int8. ``QWEN_OPS_BENCH_QUICK=1`` shrinks all of it (see kbench.py).
"""
from __future__ import annotations

import pytest
import torch

import kbench
from kbench import DTYPE, pick
from qwen_ops import ops
from qwen_ops.testing import SHAPES, cache_write_call, decode_call, mixed_call, prefill_call

QWEN = SHAPES["qwen3.5"]
HQ, HKV, D = pick((QWEN.hq, QWEN.hkv, QWEN.head_dim), (4, 1, 64))
BLOCK = pick(QWEN.block_size, 16)
CACHE_DTYPES = [pytest.param(DTYPE, id="float"), pytest.param(torch.int8, id="int8")]


def cache_bytes(total_tokens, cache_dtype):
    return 2 * total_tokens * HKV * D * torch.empty(0, dtype=cache_dtype).element_size()


@pytest.mark.parametrize("backend", kbench.backends("reshape_and_cache"))
@pytest.mark.parametrize("cache_dtype", CACHE_DTYPES)
@pytest.mark.parametrize("tokens", pick([256, 8192], [16]))
def test_reshape_and_cache(benchmark, backend, cache_dtype, tokens):
    gen = kbench.generator()
    kbench.require_memory(2 * cache_bytes(tokens, cache_dtype) + cache_bytes(tokens, DTYPE), "the caches")
    call = cache_write_call(gen, tokens=tokens, hkv=HKV, head_dim=D, block_size=BLOCK,
                            num_blocks=-(-2 * tokens // BLOCK), dtype=DTYPE, cache_dtype=cache_dtype)
    kbench.run(benchmark, lambda: ops.reshape_and_cache(**call, backend=backend),
               tokens=tokens, heads_kv=HKV, head_dim=D, block_size=BLOCK)


@pytest.mark.parametrize("backend", kbench.backends("paged_decode_attention"))
@pytest.mark.parametrize("cache_dtype", CACHE_DTYPES)
@pytest.mark.parametrize("context", pick([1024, 8192, 32768], [64]))
@pytest.mark.parametrize("batch", pick([1, 32, 256], [2]))
def test_paged_decode_attention(benchmark, backend, cache_dtype, context, batch):
    gen = kbench.generator()
    kbench.require_memory(cache_bytes(batch * context, cache_dtype), "the KV cache")
    call = decode_call(gen, DTYPE, cache_dtype, HQ, HKV, D, BLOCK, [context] * batch, int8="random")
    kbench.run(benchmark, lambda: ops.paged_decode_attention(**call, backend=backend),
               batch=batch, context=context, heads_q=HQ, heads_kv=HKV, head_dim=D, block_size=BLOCK)


@pytest.mark.parametrize("backend", kbench.backends("prefill_attention"))
@pytest.mark.parametrize("context", pick([0, 8192], [0, 48]))
@pytest.mark.parametrize("tokens", pick([512, 2048, 8192], [32]))
def test_prefill_attention(benchmark, backend, context, tokens):
    gen = kbench.generator()
    # The torch reference materialises float32 scores [Hq, T, context + T].
    scores = 4 * HQ * tokens * (context + tokens) if backend == "torch" else 0
    kbench.require_memory(cache_bytes(context + 3 * tokens, DTYPE) + scores, "the inputs and scores")
    call = prefill_call(gen, DTYPE, DTYPE, HQ, HKV, D, BLOCK, [tokens], [context] if context else None)
    kbench.run(benchmark, lambda: ops.prefill_attention(**call, backend=backend),
               tokens=tokens, context=context, heads_q=HQ, heads_kv=HKV, head_dim=D)


@pytest.mark.parametrize("backend", kbench.backends("mixed_attention"))
@pytest.mark.parametrize("decodes, decode_context, chunk, chunk_context",
                         pick([(32, 4096, 2048, 2048), (128, 8192, 512, 0)], [(2, 40, 16, 16)]))
def test_mixed_attention(benchmark, backend, decodes, decode_context, chunk, chunk_context):
    """A scheduler step: ``decodes`` decode rows plus one prefill chunk, in one call."""
    gen = kbench.generator()
    lengths = [decode_context] * decodes + [chunk_context + chunk]
    scores = 4 * HQ * chunk * (chunk_context + chunk) if backend == "torch" else 0
    kbench.require_memory(cache_bytes(sum(lengths), DTYPE) + scores, "the KV cache and scores")
    call = mixed_call(gen, DTYPE, DTYPE, HQ, HKV, D, BLOCK, [1] * decodes + [chunk], lengths, decodes)
    kbench.run(benchmark, lambda: ops.mixed_attention(**call, backend=backend),
               decodes=decodes, decode_context=decode_context, chunk=chunk, chunk_context=chunk_context)
