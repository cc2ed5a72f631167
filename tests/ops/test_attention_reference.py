"""The torch attention references against naive float64 loops.

The loops are written from the contract, independently of
``ops/attention/reference.py``: each cached token is read position by position
as ``cache[block_tables[r, p // Bs], :, p % Bs]`` (dequantized from the same
stored int8 values), each query head h uses KV head ``h // (Hq / Hkv)``, and
the softmax is spelled out in float64. Causality is a list slice: new token i
sees the context and new tokens 0..i.
"""
import math

import pytest
import torch

from qwen_ops.ops import mixed_attention, paged_decode_attention, prefill_attention
from qwen_ops.testing import Draw, block_tables, paged_cache
from tolerances import REFERENCE_VS_FLOAT64, tol

F32, F16, BF16, I8 = torch.float32, torch.float16, torch.bfloat16, torch.int8
I32 = torch.int32

# ----------------------------------------------------------------------------- inputs


class Setup:
    """Caches, scales and block tables for one case."""

    def __init__(self, gen, lengths, num_q_heads, num_kv_heads, head_dim, block_size, query_dtype, cache_dtype):
        # Shuffled, interleaved blocks, -1 past each request's (never to be read), 3 blocks no
        # request owns; non-zero garbage everywhere, int8 scales varied so a channel mix-up shows.
        draw = Draw(gen)
        self.block_tables, num_blocks = block_tables(draw, lengths, block_size, spare_blocks=3)
        caches = paged_cache(draw, num_blocks, num_kv_heads, block_size, head_dim, cache_dtype, int8="random")
        self.key_cache, self.value_cache = caches["key_cache"], caches["value_cache"]
        self.k_scale, self.v_scale = caches["k_scale"], caches["v_scale"]
        self.gen, self.query_dtype = gen, query_dtype
        self.num_q_heads, self.num_kv_heads, self.head_dim = num_q_heads, num_kv_heads, head_dim

    def query(self, rows):
        return torch.randn(rows, self.num_q_heads, self.head_dim, generator=self.gen).to(self.query_dtype)

    def new_kv(self, rows):
        shape = (rows, self.num_kv_heads, self.head_dim)
        return (torch.randn(shape, generator=self.gen).to(self.query_dtype),
                torch.randn(shape, generator=self.gen).to(self.query_dtype))

    def caches(self):
        return dict(key_cache=self.key_cache, value_cache=self.value_cache, k_scale=self.k_scale,
                    v_scale=self.v_scale)


# ----------------------------------------------------------------------------- naive float64 loops


def naive_cached(cache, scale, table_row, length):
    """The first ``length`` tokens of a request, one float64 [Hkv, D] per position."""
    block_size = cache.shape[2]
    tokens = []
    for p in range(length):
        x = cache[int(table_row[p // block_size]), :, p % block_size].double()
        tokens.append(x * scale.double() if scale is not None else x)
    return tokens


def naive_attention_row(q, keys, values, scale):
    """One query token: q [Hq, D]; keys/values lists of [Hkv, D]. float64 [Hq, D]."""
    num_q_heads = q.shape[0]
    out = torch.zeros(q.shape, dtype=torch.float64)
    if not keys:
        return out  # nothing visible: zeros by the project's decision
    k, v = torch.stack(keys), torch.stack(values)  # [S, Hkv, D]
    group = num_q_heads // k.shape[1]
    for h in range(num_q_heads):
        scores = (k[:, h // group] @ q[h].double() * scale).tolist()
        top = max(scores)
        weights = [math.exp(s - top) for s in scores]
        total = sum(weights)
        out[h] = torch.tensor([w / total for w in weights], dtype=torch.float64) @ v[:, h // group]
    return out


def naive_request(query, rows, context, new_keys, new_values, setup, table_row, scale, causal):
    """Query ``rows`` of one request over ``context`` cached tokens then its new tokens."""
    keys = naive_cached(setup.key_cache, setup.k_scale, table_row, context)
    values = naive_cached(setup.value_cache, setup.v_scale, table_row, context)
    out = []
    for i, t in enumerate(rows):
        seen = i + 1 if causal else len(rows)
        out.append(naive_attention_row(query[t], keys + new_keys[:seen], values + new_values[:seen], scale))
    return out


def new_tokens(key, value, rows):
    return [key[t].double() for t in rows], [value[t].double() for t in rows]


def assert_matches(got, want_rows, query):
    assert got.dtype == query.dtype and got.shape == query.shape
    want = torch.stack(want_rows) if want_rows else torch.zeros(query.shape, dtype=torch.float64)
    torch.testing.assert_close(got.double(), want, **tol(REFERENCE_VS_FLOAT64, query.dtype))


def default_scale(head_dim):
    return 1 / math.sqrt(head_dim)


# ----------------------------------------------------------------------------- cases

def case_id(hq, hkv, d, bs, query_dtype, cache_dtype):
    name = f"gqa{hq // hkv}-d{d}-bs{bs}-q{query_dtype}-kv{cache_dtype}"
    return name.replace("torch.", "").replace("float", "f")


# (Hq, Hkv, D, Bs, query dtype, cache dtype): GQA 1/2/4/8, D and Bs each at least
# twice, every float cache dtype, and int8 under each query dtype -- paired, not crossed.
MATRIX = [
    (2, 2, 64, 16, F32, F32),
    (4, 2, 128, 64, F16, F16),
    (4, 1, 256, 128, BF16, BF16),
    (8, 1, 64, 128, F32, I8),
    (4, 2, 256, 16, F16, I8),
    (8, 2, 128, 64, BF16, I8),
]
MATRIX_IDS = [case_id(*c) for c in MATRIX]


@pytest.mark.parametrize("hq,hkv,d,bs,query_dtype,cache_dtype", MATRIX, ids=MATRIX_IDS)
def test_paged_decode_attention_matches_naive_loop(gen, hq, hkv, d, bs, query_dtype, cache_dtype):
    # One token, a full block, one token past it, nothing, and many blocks.
    seq_lens = [1, bs, bs + 1, 0, 4 * bs + 3]
    setup = Setup(gen, seq_lens, hq, hkv, d, bs, query_dtype, cache_dtype)
    query = setup.query(len(seq_lens))
    scale = 0.3 if cache_dtype == I8 and query_dtype == F32 else None  # an explicit scale once

    got = paged_decode_attention(query, setup.key_cache, setup.value_cache, setup.block_tables,
                                 torch.tensor(seq_lens, dtype=I32), scale=scale, k_scale=setup.k_scale,
                                 v_scale=setup.v_scale, backend="torch")

    naive_scale = scale if scale is not None else default_scale(d)
    want = [naive_request(query, [r], n, [], [], setup, setup.block_tables[r], naive_scale, True)[0]
            for r, n in enumerate(seq_lens)]
    assert_matches(got, want, query)
    assert not got[3].any()  # seq_lens 0: zeros, not NaN


# (q_len, context_len) per request: empty requests first, in the middle and last;
# contexts of one token, a full block, one past it, none and several blocks.
def prefill_requests(bs):
    return [(0, bs), (3, 0), (5, bs + 1), (0, 0), (2, 2 * bs + 3), (1, 1), (4, bs), (0, 2)]


PREFILL_CASES = [
    # (Hq, Hkv, D, Bs, query dtype, cache dtype or None = no context, causal)
    (4, 2, 64, 16, F32, None, True),
    (2, 2, 128, 64, F16, None, False),
    (8, 1, 256, 16, BF16, BF16, True),
    (8, 1, 64, 64, F32, I8, True),
    (4, 2, 128, 128, F16, I8, False),
    (4, 1, 64, 128, F32, F32, False),
    (8, 2, 256, 64, F16, F16, True),
]


@pytest.mark.parametrize("hq,hkv,d,bs,query_dtype,cache_dtype,causal", PREFILL_CASES,
                         ids=[case_id(*c[:5], c[5] or "none") + ("-causal" if c[6] else "-full")
                              for c in PREFILL_CASES])
def test_prefill_attention_matches_naive_loop(gen, hq, hkv, d, bs, query_dtype, cache_dtype, causal):
    requests = prefill_requests(bs)
    with_context = cache_dtype is not None
    contexts = [c if with_context else 0 for _, c in requests]
    setup = Setup(gen, contexts, hq, hkv, d, bs, query_dtype, cache_dtype or query_dtype)
    cu = [0]
    for q_len, _ in requests:
        cu.append(cu[-1] + q_len)
    query = setup.query(cu[-1])
    key, value = setup.new_kv(cu[-1])

    cache_args = {}
    if with_context:
        cache_args = dict(setup.caches(), block_tables=setup.block_tables,
                          context_lens=torch.tensor(contexts, dtype=I32))
    got = prefill_attention(query, key, value, torch.tensor(cu, dtype=I32), causal=causal, backend="torch",
                            **cache_args)

    want = []
    for r, context in enumerate(contexts):
        rows = list(range(cu[r], cu[r + 1]))
        want += naive_request(query, rows, context, *new_tokens(key, value, rows), setup, setup.block_tables[r],
                              default_scale(d), causal)
    assert_matches(got, want, query)


def mixed_batch(kind, bs):
    """(q_len, seq_len) per request, decodes first, and the number of decodes."""
    decodes = [(1, 1), (1, bs), (1, bs + 1), (1, 3 * bs + 2)]
    # Contexts of a full block, none, two blocks plus two, and one past a block.
    prefills = [(3, bs + 3), (1, 1), (4, 2 * bs + 6), (2, bs + 3)]
    batches = {"both": (decodes + prefills, len(decodes)), "decodes-only": (decodes, len(decodes)),
               "prefills-only": (prefills, 0)}
    return batches[kind]


MIXED_CASES = [
    (4, 2, 128, 16, F32, F32, "both"),
    (8, 2, 64, 64, BF16, I8, "both"),
    (2, 2, 256, 128, F16, F16, "decodes-only"),
    (8, 1, 128, 16, F16, I8, "prefills-only"),
]


@pytest.mark.parametrize("hq,hkv,d,bs,query_dtype,cache_dtype,kind", MIXED_CASES,
                         ids=[case_id(*c[:6]) + "-" + c[6] for c in MIXED_CASES])
def test_mixed_attention_matches_naive_loop(gen, hq, hkv, d, bs, query_dtype, cache_dtype, kind):
    batch, num_decodes = mixed_batch(kind, bs)
    seq_lens = [s for _, s in batch]
    setup = Setup(gen, seq_lens, hq, hkv, d, bs, query_dtype, cache_dtype)
    starts = [0]
    for q_len, _ in batch:
        starts.append(starts[-1] + q_len)
    query = setup.query(starts[-1])
    key, value = setup.new_kv(starts[-1])

    got = mixed_attention(query, key, value, setup.key_cache, setup.value_cache, setup.block_tables,
                          torch.tensor(starts, dtype=I32), torch.tensor(seq_lens, dtype=I32), num_decodes,
                          k_scale=setup.k_scale, v_scale=setup.v_scale, backend="torch")

    want = []
    for r, (q_len, seq_len) in enumerate(batch):
        rows = list(range(starts[r], starts[r + 1]))
        if r < num_decodes:  # everything from the cache, the new token included
            want += naive_request(query, rows, seq_len, [], [], setup, setup.block_tables[r], default_scale(d), True)
        else:  # context from the cache, the chunk itself from key/value
            want += naive_request(query, rows, seq_len - q_len, *new_tokens(key, value, rows), setup,
                                  setup.block_tables[r], default_scale(d), True)
    assert_matches(got, want, query)


def test_mixed_attention_is_decode_then_prefill(gen):
    """The contract's equation, bit for bit, with a zero-length decode context and an int8 cache."""
    bs, d = 16, 64
    batch, num_decodes = [(1, 0), (1, 17), (3, 20), (2, 2)], 2
    setup = Setup(gen, [s for _, s in batch], 4, 2, d, bs, F32, I8)
    query = setup.query(7)
    key, value = setup.new_kv(7)
    starts = torch.tensor([0, 1, 2, 5, 7], dtype=I32)
    seq_lens = torch.tensor([s for _, s in batch], dtype=I32)

    mixed = mixed_attention(query, key, value, setup.key_cache, setup.value_cache, setup.block_tables, starts,
                            seq_lens, num_decodes, k_scale=setup.k_scale, v_scale=setup.v_scale, backend="torch")
    decode = paged_decode_attention(query[:2], setup.key_cache, setup.value_cache, setup.block_tables[:2],
                                    seq_lens[:2], k_scale=setup.k_scale, v_scale=setup.v_scale, backend="torch")
    prefill = prefill_attention(query[2:], key[2:], value[2:], starts[2:] - 2, block_tables=setup.block_tables[2:],
                                context_lens=torch.tensor([17, 0], dtype=I32), backend="torch", **setup.caches())
    assert torch.equal(mixed, torch.cat([decode, prefill]))
    assert not mixed[0].any() and not torch.isnan(mixed).any()


def test_empty_batches_give_empty_outputs(gen):
    setup = Setup(gen, [], 2, 1, 64, 16, F32, F32)
    empty_query = setup.query(0)
    empty_key, empty_value = setup.new_kv(0)
    no_requests = torch.zeros(0, dtype=I32)
    table = torch.zeros(0, 1, dtype=I32)
    out = paged_decode_attention(empty_query, setup.key_cache, setup.value_cache, table, no_requests,
                                 backend="torch")
    assert out.shape == (0, 2, 64)
    out = mixed_attention(empty_query, empty_key, empty_value, setup.key_cache, setup.value_cache, table,
                          torch.zeros(1, dtype=I32), no_requests, 0, backend="torch")
    assert out.shape == (0, 2, 64)
    # Requests with no new tokens at all.
    out = prefill_attention(empty_query, empty_key, empty_value, torch.zeros(3, dtype=I32), backend="torch")
    assert out.shape == (0, 2, 64)
