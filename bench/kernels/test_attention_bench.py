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
from kbench import DEVICE, DTYPE, pick
from qwen_ops import ops

HQ, HKV, D = pick((16, 4, 256), (4, 1, 64))
BLOCK = pick(128, 16)
CACHE_DTYPES = [pytest.param(DTYPE, id="float"), pytest.param(torch.int8, id="int8")]


def cache_for(gen, lengths, cache_dtype):
    """Paged caches holding ``lengths[r]`` tokens for each request, with shuffled block tables."""
    per_request = [max(1, -(-n // BLOCK)) for n in lengths]
    num_blocks = sum(per_request)
    shape = (num_blocks, HKV, BLOCK, D)
    if cache_dtype == torch.int8:
        caches = [torch.randint(-127, 128, shape, generator=gen, device=DEVICE, dtype=torch.int8) for _ in range(2)]
        scales = dict(k_scale=torch.full((HKV, D), 0.02, device=DEVICE),
                      v_scale=torch.full((HKV, D), 0.02, device=DEVICE))
    else:
        caches = [kbench.randn(*shape, gen=gen, dtype=cache_dtype) for _ in range(2)]
        scales = {}
    order = torch.randperm(num_blocks, generator=gen, device=DEVICE).to(torch.int32)
    table = torch.zeros(len(lengths), max(per_request), dtype=torch.int32, device=DEVICE)
    start = 0
    for r, n in enumerate(per_request):
        table[r, :n] = order[start:start + n]
        start += n
    return caches, table, scales


def cache_bytes(total_tokens, cache_dtype):
    return 2 * total_tokens * HKV * D * torch.empty(0, dtype=cache_dtype).element_size()


@pytest.mark.parametrize("backend", kbench.backends("reshape_and_cache"))
@pytest.mark.parametrize("cache_dtype", CACHE_DTYPES)
@pytest.mark.parametrize("tokens", pick([256, 8192], [16]))
def test_reshape_and_cache(benchmark, backend, cache_dtype, tokens):
    gen = kbench.generator()
    kbench.require_memory(2 * cache_bytes(tokens, cache_dtype) + cache_bytes(tokens, DTYPE), "the caches")
    (key_cache, value_cache), _, scales = cache_for(gen, [2 * tokens], cache_dtype)
    key = kbench.randn(tokens, HKV, D, gen=gen)
    value = kbench.randn(tokens, HKV, D, gen=gen)
    slots = torch.randperm(key_cache.shape[0] * BLOCK, generator=gen, device=DEVICE)[:tokens].to(torch.int32)
    kbench.run(benchmark, lambda: ops.reshape_and_cache(key, value, key_cache, value_cache, slots, backend=backend,
                                                        **scales),
               tokens=tokens, heads_kv=HKV, head_dim=D, block_size=BLOCK)


@pytest.mark.parametrize("backend", kbench.backends("paged_decode_attention"))
@pytest.mark.parametrize("cache_dtype", CACHE_DTYPES)
@pytest.mark.parametrize("context", pick([1024, 8192, 32768], [64]))
@pytest.mark.parametrize("batch", pick([1, 32, 256], [2]))
def test_paged_decode_attention(benchmark, backend, cache_dtype, context, batch):
    gen = kbench.generator()
    kbench.require_memory(cache_bytes(batch * context, cache_dtype), "the KV cache")
    (key_cache, value_cache), table, scales = cache_for(gen, [context] * batch, cache_dtype)
    query = kbench.randn(batch, HQ, D, gen=gen)
    seq_lens = torch.full((batch,), context, dtype=torch.int32, device=DEVICE)
    kbench.run(benchmark, lambda: ops.paged_decode_attention(query, key_cache, value_cache, table, seq_lens,
                                                             backend=backend, **scales),
               batch=batch, context=context, heads_q=HQ, heads_kv=HKV, head_dim=D, block_size=BLOCK)


@pytest.mark.parametrize("backend", kbench.backends("prefill_attention"))
@pytest.mark.parametrize("context", pick([0, 8192], [0, 48]))
@pytest.mark.parametrize("tokens", pick([512, 2048, 8192], [32]))
def test_prefill_attention(benchmark, backend, context, tokens):
    gen = kbench.generator()
    # The torch reference materialises float32 scores [Hq, T, context + T].
    scores = 4 * HQ * tokens * (context + tokens) if backend == "torch" else 0
    kbench.require_memory(cache_bytes(context + 3 * tokens, DTYPE) + scores, "the inputs and scores")
    query = kbench.randn(tokens, HQ, D, gen=gen)
    key = kbench.randn(tokens, HKV, D, gen=gen)
    value = kbench.randn(tokens, HKV, D, gen=gen)
    cu = kbench.offsets([tokens])
    extra = {}
    if context:
        (key_cache, value_cache), table, _ = cache_for(gen, [context], DTYPE)
        extra = dict(key_cache=key_cache, value_cache=value_cache, block_tables=table,
                     context_lens=torch.tensor([context], dtype=torch.int32, device=DEVICE))
    kbench.run(benchmark, lambda: ops.prefill_attention(query, key, value, cu, backend=backend, **extra),
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
    (key_cache, value_cache), table, _ = cache_for(gen, lengths, DTYPE)
    tokens = decodes + chunk
    query = kbench.randn(tokens, HQ, D, gen=gen)
    key = kbench.randn(tokens, HKV, D, gen=gen)
    value = kbench.randn(tokens, HKV, D, gen=gen)
    query_start_loc = kbench.offsets([1] * decodes + [chunk])
    seq_lens = torch.tensor(lengths, dtype=torch.int32, device=DEVICE)
    kbench.run(benchmark, lambda: ops.mixed_attention(query, key, value, key_cache, value_cache, table,
                                                      query_start_loc, seq_lens, decodes, backend=backend),
               decodes=decodes, decode_context=decode_context, chunk=chunk, chunk_context=chunk_context)
