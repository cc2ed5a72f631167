"""Every ``qwen_ops._C.ascendc_*`` binding called directly with bad input.

Once a step's metadata is checked once on the host (issue 9), the bindings'
``TORCH_CHECK``s and the host tiling's limits are what stand between a bad
call and device memory. Each binding gets, where the concept applies: a
non-contiguous tensor, a wrong dtype, a wrong shape, an unsupported head dim
(or size that no tile fits) and a block table with the wrong row count. Each
must raise a clear error naming the problem, and write nothing. A positive
control runs each valid call, so every failure is the breakage's.
"""
from __future__ import annotations

import pytest
import torch

from qwen_ops.ops import _backend

if "ascendc" not in _backend.available_backends():  # pragma: no cover - the extension is part of the build
    pytest.skip("qwen_ops._C was built without the Ascend C kernels", allow_module_level=True)

from qwen_ops import _C  # noqa: E402


def _g():
    return torch.Generator().manual_seed(3)


def _rand(*shape, dtype=torch.float32):
    return torch.randn(*shape, generator=_GEN).to(dtype)


_GEN = _g()


# ----------------------------------------------------------------------------- valid calls (keyword arguments)

def reshape_and_cache():
    return dict(key=_rand(3, 2, 32), value=_rand(3, 2, 32), key_cache=torch.zeros(2, 2, 16, 32),
                value_cache=torch.zeros(2, 2, 16, 32), slot_mapping=torch.tensor([0, 5, 17]))


def paged_decode_attention():
    return dict(query=_rand(2, 4, 32), key_cache=_rand(3, 2, 16, 32), value_cache=_rand(3, 2, 16, 32),
                block_tables=torch.tensor([[0, 2], [1, 0]], dtype=torch.int32),
                seq_lens=torch.tensor([20, 3], dtype=torch.int32), scale=0.2)


def fused_recurrent_gated_delta_rule():
    return dict(q=_rand(1, 3, 1, 16), k=_rand(1, 3, 1, 16), v=_rand(1, 3, 2, 16), g=-torch.rand(1, 3, 2),
                beta=torch.rand(1, 3, 2), scale=0.25, initial_state=_rand(4, 2, 16, 16), output_final_state=True,
                cu_seqlens=torch.tensor([0, 1, 3], dtype=torch.int32),
                ssm_state_indices=torch.tensor([2, 0], dtype=torch.int32), has_initial_state=torch.tensor([True, False]))


def chunk_gated_delta_rule():
    return dict(q=_rand(1, 70, 1, 16), k=_rand(1, 70, 1, 16), v=_rand(1, 70, 2, 16), g=-torch.rand(1, 70, 2),
                beta=torch.rand(1, 70, 2), scale=0.25, initial_state=_rand(4, 2, 16, 16), output_final_state=True,
                cu_seqlens=torch.tensor([0, 1, 70], dtype=torch.int32),
                ssm_state_indices=torch.tensor([2, 0], dtype=torch.int32), has_initial_state=torch.tensor([True, False]))


def causal_conv1d_update():
    return dict(x=_rand(2, 64), conv_states=_rand(3, 3, 64), weight=_rand(64, 4), bias=_rand(64),
                cache_indices=torch.tensor([1, -1]), silu=True)


def causal_conv1d_fn():
    return dict(x=_rand(5, 64), weight=_rand(64, 4), bias=_rand(64), conv_states=_rand(3, 3, 64),
                query_start_loc=torch.tensor([0, 2, 5], dtype=torch.int32), cache_indices=torch.tensor([2, 0]),
                has_initial_state=torch.tensor([True, False]), silu=True)


def fused_gdn_gating():
    return dict(A_log=_rand(4), a=_rand(3, 4), b=_rand(3, 4), dt_bias=_rand(4))


VALID = {f.__name__: f for f in (reshape_and_cache, paged_decode_attention, fused_recurrent_gated_delta_rule,
                                 causal_conv1d_update, causal_conv1d_fn, fused_gdn_gating, chunk_gated_delta_rule)}
# What each binding may write in place.
WRITES = {"reshape_and_cache": ("key_cache", "value_cache"), "fused_recurrent_gated_delta_rule": ("initial_state",),
          "chunk_gated_delta_rule": ("initial_state",),
          "causal_conv1d_update": ("conv_states",), "causal_conv1d_fn": ("conv_states",)}


def test_every_kernel_binding_is_covered():
    assert set(VALID) == set(_C.ascendc_kernels)


@pytest.mark.parametrize("name", sorted(VALID))
def test_valid_call_runs(name):
    getattr(_C, f"ascendc_{name}")(**VALID[name]())


# ----------------------------------------------------------------------------- breakages

def strided(name):
    """Same shape and values, a non-contiguous view."""
    def mutate(call):
        call[name] = torch.stack([call[name], call[name]], dim=-1)[..., 0]
    return mutate


def put(name, make):
    def mutate(call):
        call[name] = make(call[name])
    return mutate


def many(*mutations):
    def mutate(call):
        for m in mutations:
            m(call)
    return mutate


def wider_head(d, *names):
    """Last dim d for each tensor named (zeros keep every other check happy)."""
    return many(*(put(n, lambda t, d=d: torch.zeros(*t.shape[:-1], d, dtype=t.dtype)) for n in names))


F16 = torch.float16
CASES = [
    # reshape_and_cache
    ("reshape_and_cache", "non-contiguous key", strided("key"), r"'key' must be contiguous"),
    ("reshape_and_cache", "non-contiguous key_cache", strided("key_cache"), r"'key_cache' must be contiguous"),
    ("reshape_and_cache", "key float16, value float32", put("key", lambda t: t.to(F16)),
     r"'key' and 'value' must share one float dtype"),
    ("reshape_and_cache", "slot_mapping one short", put("slot_mapping", lambda t: t[:-1]),
     r"'slot_mapping' must have shape \[3\]"),
    ("reshape_and_cache", "head dim no tile fits", wider_head(16384, "key", "value", "key_cache", "value_cache"),
     r"reshape_and_cache: one head of D = 16384 does not fit the unified-buffer budget"),
    # paged_decode_attention
    ("paged_decode_attention", "non-contiguous query", strided("query"), r"'query' must be contiguous"),
    ("paged_decode_attention", "query float16", put("query", lambda t: t.to(F16)),
     r"a float cache must have query's dtype"),
    ("paged_decode_attention", "seq_lens int64", put("seq_lens", lambda t: t.long()),
     r"'block_tables' and 'seq_lens' must be int32"),
    ("paged_decode_attention", "value_cache one block short", put("value_cache", lambda t: t[:-1].contiguous()),
     r"'value_cache' must have shape \[3, 2, 16, 32\]"),
    ("paged_decode_attention", "head dim 40", wider_head(40, "query", "key_cache", "value_cache"),
     r"needs D to be a multiple of 16, got 40"),
    ("paged_decode_attention", "block_tables one row short", put("block_tables", lambda t: t[:1]),
     r"'block_tables' must have N = 2 rows"),
    # fused_recurrent_gated_delta_rule
    ("fused_recurrent_gated_delta_rule", "non-contiguous v", strided("v"), r"'v' must be contiguous"),
    ("fused_recurrent_gated_delta_rule", "non-contiguous state pool", strided("initial_state"),
     r"'initial_state' must be contiguous"),
    ("fused_recurrent_gated_delta_rule", "g bfloat16", put("g", lambda t: t.bfloat16()), r"'g' must be float32"),
    ("fused_recurrent_gated_delta_rule", "ssm_state_indices one short", put("ssm_state_indices", lambda t: t[:1]),
     r"'ssm_state_indices' must have shape \[2\]"),
    ("fused_recurrent_gated_delta_rule", "state head dim differs", put("initial_state", lambda t: t[..., :8].contiguous()),
     r"'initial_state' must have shape \[4, 2, 16, 16\]"),
    ("fused_recurrent_gated_delta_rule", "key head dim no tile fits",
     many(wider_head(8192, "q", "k"), put("initial_state", lambda t: torch.zeros(4, 2, 8192, 16))),
     r"a state column tile with Dk = 8192 does not fit"),
    # chunk_gated_delta_rule
    ("chunk_gated_delta_rule", "non-contiguous k", strided("k"), r"'k' must be contiguous"),
    ("chunk_gated_delta_rule", "non-contiguous state pool", strided("initial_state"),
     r"'initial_state' must be contiguous"),
    ("chunk_gated_delta_rule", "beta int32", put("beta", lambda t: t.int()), r"'beta' must be a float dtype"),
    ("chunk_gated_delta_rule", "has_initial_state one short", put("has_initial_state", lambda t: t[:1]),
     r"'has_initial_state' must have shape \[2\]"),
    ("chunk_gated_delta_rule", "state head dim differs", put("initial_state", lambda t: t[..., :8].contiguous()),
     r"'initial_state' must have shape \[4, 2, 16, 16\]"),
    ("chunk_gated_delta_rule", "key head dim past the limit",
     many(wider_head(272, "q", "k"), put("initial_state", lambda t: torch.zeros(4, 2, 272, 16))),
     r"head dims Dk and Dv from 1 to 256 .*Dk = 272, Dv = 16"),
    ("chunk_gated_delta_rule", "value head dim past the limit",
     many(wider_head(257, "v"), put("initial_state", lambda t: torch.zeros(4, 2, 16, 257))),
     r"head dims Dk and Dv from 1 to 256 .*Dk = 16, Dv = 257"),
    # causal_conv1d_update
    ("causal_conv1d_update", "non-contiguous conv_states", strided("conv_states"), r"'conv_states' must be contiguous"),
    ("causal_conv1d_update", "cache_indices float", put("cache_indices", lambda t: t.float()),
     r"'cache_indices' must be int32/int64"),
    ("causal_conv1d_update", "bias one short", put("bias", lambda t: t[:-1]), r"'bias' must have shape \[64\]"),
    ("causal_conv1d_update", "width no tile fits",
     many(put("weight", lambda t: torch.zeros(64, 4000)), put("conv_states", lambda t: torch.zeros(3, 3999, 64))),
     r"32 channels of width K = 4000 does not fit"),
    # causal_conv1d_fn
    ("causal_conv1d_fn", "non-contiguous x", strided("x"), r"'x' must be contiguous"),
    ("causal_conv1d_fn", "non-contiguous conv_states", strided("conv_states"), r"'conv_states' must be contiguous"),
    ("causal_conv1d_fn", "has_initial_state int32", put("has_initial_state", lambda t: t.int()),
     r"'has_initial_state' must be bool"),
    ("causal_conv1d_fn", "x int32", put("x", lambda t: t.int()), r"x, weight, bias and conv_states must be float"),
    ("causal_conv1d_fn", "cache_indices one short", put("cache_indices", lambda t: t[:1]),
     r"'cache_indices' must have shape \[2\]"),
    ("causal_conv1d_fn", "conv_states width", put("conv_states", lambda t: t[:, 1:].contiguous()),
     r"'conv_states' must have shape \[3, 3, 64\]"),
    ("causal_conv1d_fn", "width no tile fits",
     many(put("weight", lambda t: torch.zeros(64, 4000)), put("conv_states", lambda t: torch.zeros(3, 3999, 64))),
     r"one token of 32 channels of width K = 4000 does not fit"),
    # fused_gdn_gating
    ("fused_gdn_gating", "non-contiguous a", strided("a"), r"'a' must be contiguous"),
    ("fused_gdn_gating", "b int32", put("b", lambda t: t.int()), r"A_log, a, b and dt_bias must be float"),
    ("fused_gdn_gating", "dt_bias one short", put("dt_bias", lambda t: t[:-1]), r"'dt_bias' must have shape \[4\]"),
    ("fused_gdn_gating", "heads no tile fits", many(*(put(n, lambda t: torch.zeros(*t.shape[:-1], 60000))
                                                     for n in ("A_log", "a", "b", "dt_bias"))),
     r"one token row of Hv = 60000 heads does not fit"),
]


# prefill_attention (the mixed cube + vector kernel): float16 paged context.
def prefill_attention():
    return dict(query=_rand(5, 4, 32, dtype=F16), key=_rand(5, 2, 32, dtype=F16), value=_rand(5, 2, 32, dtype=F16),
                cu_seqlens_q=torch.tensor([0, 3, 5], dtype=torch.int32), scale=0.2,
                key_cache=_rand(3, 2, 16, 32, dtype=F16), value_cache=_rand(3, 2, 16, 32, dtype=F16),
                block_tables=torch.tensor([[0, 2], [1, 0]], dtype=torch.int32),
                context_lens=torch.tensor([20, 3], dtype=torch.int32), causal=True)


VALID["prefill_attention"] = prefill_attention


def test_prefill_attention_valid_call_runs():
    """The positive control (registered after test_valid_call_runs was parametrized)."""
    call = prefill_attention()
    out = _C.ascendc_prefill_attention(**call)
    assert out.shape == call["query"].shape and bool(torch.isfinite(out).all())
CASES += [
    ("prefill_attention", "non-contiguous query", strided("query"), r"'query' must be contiguous"),
    ("prefill_attention", "non-contiguous key_cache", strided("key_cache"), r"'key_cache' must be contiguous"),
    ("prefill_attention", "key float32", put("key", lambda t: t.float()),
     r"'key' and 'value' must have the query's dtype"),
    ("prefill_attention", "cache float32", many(put("key_cache", lambda t: t.float()),
                                                put("value_cache", lambda t: t.float())),
     r"a float cache must have query's dtype"),
    ("prefill_attention", "cu_seqlens_q int64", put("cu_seqlens_q", lambda t: t.long()),
     r"'cu_seqlens_q' must be \[N\+1\] int32"),
    ("prefill_attention", "context_lens int64", put("context_lens", lambda t: t.long()),
     r"'block_tables' and 'context_lens' must be int32"),
    ("prefill_attention", "value_cache one block short", put("value_cache", lambda t: t[:-1].contiguous()),
     r"'value_cache' must have shape \[3, 2, 16, 32\]"),
    ("prefill_attention", "block_tables one row short", put("block_tables", lambda t: t[:1]),
     r"'block_tables' must have N = 2 rows"),
    ("prefill_attention", "cache without context_lens", put("context_lens", lambda t: None),
     r"come with context_lens, and only with it"),
    ("prefill_attention", "int8 cache without scales", many(put("key_cache", lambda t: t.to(torch.int8)),
                                                            put("value_cache", lambda t: t.to(torch.int8))),
     r"k_scale/v_scale are required for int8 caches"),
    ("prefill_attention", "head dim 40", wider_head(40, "query", "key", "value", "key_cache", "value_cache"),
     r"needs a head dim D that is a multiple of 16 and at most 256, got 40"),
    ("prefill_attention", "head dim 512", wider_head(512, "query", "key", "value", "key_cache", "value_cache"),
     r"needs a head dim D that is a multiple of 16 and at most 256, got 512"),
]

# mixed_attention (one launch: decode rows on the AIVs, prefill chunks on cube + vector): two decodes, one
# prefill chunk of 3 tokens over 4 cached ones, float16 cache.
def mixed_attention():
    return dict(query=_rand(5, 4, 32, dtype=F16), key=_rand(5, 2, 32, dtype=F16), value=_rand(5, 2, 32, dtype=F16),
                key_cache=_rand(3, 2, 16, 32, dtype=F16), value_cache=_rand(3, 2, 16, 32, dtype=F16),
                block_tables=torch.tensor([[0, 2], [1, 0], [2, 0]], dtype=torch.int32),
                query_start_loc=torch.tensor([0, 1, 2, 5], dtype=torch.int32),
                seq_lens=torch.tensor([20, 3, 7], dtype=torch.int32), num_decodes=2, scale=0.2)


VALID["mixed_attention"] = mixed_attention


def test_mixed_attention_valid_call_runs():
    """The positive control (registered after test_valid_call_runs was parametrized)."""
    call = mixed_attention()
    out = _C.ascendc_mixed_attention(**call)
    assert out.shape == call["query"].shape and bool(torch.isfinite(out).all())


CASES += [
    ("mixed_attention", "non-contiguous query", strided("query"), r"'query' must be contiguous"),
    ("mixed_attention", "non-contiguous value_cache", strided("value_cache"), r"'value_cache' must be contiguous"),
    ("mixed_attention", "value float32", put("value", lambda t: t.float()),
     r"'key' and 'value' must have the query's dtype"),
    ("mixed_attention", "cache float32", many(put("key_cache", lambda t: t.float()),
                                              put("value_cache", lambda t: t.float())),
     r"a float cache must have query's dtype"),
    ("mixed_attention", "query_start_loc int64", put("query_start_loc", lambda t: t.long()),
     r"'query_start_loc' must be \[N\+1\] int32"),
    ("mixed_attention", "seq_lens int64", put("seq_lens", lambda t: t.long()),
     r"'block_tables' and 'seq_lens' must be int32"),
    ("mixed_attention", "key one token short", put("key", lambda t: t[:-1].contiguous()),
     r"'key' must have shape \[5, 2, 32\]"),
    ("mixed_attention", "block_tables one row short", put("block_tables", lambda t: t[:2]),
     r"'block_tables' must have N = 3 rows"),
    ("mixed_attention", "num_decodes past N", put("num_decodes", lambda t: 4), r"'num_decodes' must be in \[0, N = 3\]"),
    ("mixed_attention", "int8 cache without scales", many(put("key_cache", lambda t: t.to(torch.int8)),
                                                          put("value_cache", lambda t: t.to(torch.int8))),
     r"k_scale/v_scale are required for int8 caches"),
    ("mixed_attention", "head dim 40", wider_head(40, "query", "key", "value", "key_cache", "value_cache"),
     r"mixed_attention: the Ascend C kernel needs a head dim D that is a multiple of 16 and at most 256, got 40"),
    ("mixed_attention", "head dim 512", wider_head(512, "query", "key", "value", "key_cache", "value_cache"),
     r"mixed_attention: the Ascend C kernel needs a head dim D that is a multiple of 16 and at most 256, got 512"),
]

# fused_experts (the mixed grouped-GEMM kernel): 5 tokens, top-2 of 3 experts, H = 24, I = 8, float16.
def fused_experts():
    return dict(hidden_states=_rand(5, 24, dtype=F16), w13=_rand(3, 16, 24, dtype=F16), w2=_rand(3, 24, 8, dtype=F16),
                topk_weights=torch.rand(5, 2), topk_ids=torch.tensor([[0, 2], [1, 0], [2, 1], [0, 1], [2, 0]]))


VALID["fused_experts"] = fused_experts


def test_fused_experts_valid_call_runs():
    """The positive control (registered after test_valid_call_runs was parametrized)."""
    call = fused_experts()
    out = _C.ascendc_fused_experts(**call)
    assert out.shape == call["hidden_states"].shape and bool(torch.isfinite(out).all())


CASES += [
    ("fused_experts", "non-contiguous hidden_states", strided("hidden_states"), r"'hidden_states' must be contiguous"),
    ("fused_experts", "non-contiguous w2", strided("w2"), r"'w2' must be contiguous"),
    ("fused_experts", "hidden_states int32", put("hidden_states", lambda t: t.int()),
     r"'hidden_states' \[T, H\] must be float32, float16 or bfloat16"),
    ("fused_experts", "w13 float32", put("w13", lambda t: t.float()), r"'w13' and 'w2' must have hidden_states' dtype"),
    ("fused_experts", "w13 odd 2I", put("w13", lambda t: t[:, :-1].contiguous()), r"'w13' \[E, 2I, H\] must have an even"),
    ("fused_experts", "w13 wrong H", put("w13", lambda t: t[..., :-1].contiguous()),
     r"'w13' must have shape \[3, 16, 24\]"),
    ("fused_experts", "w2 wrong I", put("w2", lambda t: t[..., :-1].contiguous()), r"'w2' must have shape \[3, 24, 8\]"),
    ("fused_experts", "topk_ids float", put("topk_ids", lambda t: t.float()), r"'topk_ids' \[T, K\] must be int32 or int64"),
    ("fused_experts", "topk_ids one token short", put("topk_ids", lambda t: t[:-1].contiguous()),
     r"'topk_ids' must have shape \[5, 2\]"),
    ("fused_experts", "K past E", many(put("topk_ids", lambda t: torch.zeros(5, 4, dtype=torch.long)),
                                       put("topk_weights", lambda t: torch.rand(5, 4))),
     r"1 <= K <= E = 3"),
    ("fused_experts", "topk_weights wrong K", put("topk_weights", lambda t: t[:, :1].contiguous()),
     r"'topk_weights' must have shape \[5, 2\]"),
    ("fused_experts", "topk_weights int64", put("topk_weights", lambda t: t.long()),
     r"'topk_weights' \[T, K\] must be a float dtype"),
    ("fused_experts", "expert id 3 of 3", put("topk_ids", lambda t: t.masked_fill(t == 2, 3)),
     r"'topk_ids' has expert id 3 outside \[0, 3\)"),
    ("fused_experts", "expert id -1", put("topk_ids", lambda t: t.masked_fill(t == 1, -1)),
     r"'topk_ids' has expert id -1 outside \[0, 3\)"),
    ("fused_experts", "hidden size no L1 tile fits",
     many(put("hidden_states", lambda t: torch.zeros(5, 20000, dtype=F16)),
          put("w13", lambda t: torch.zeros(3, 16, 20000, dtype=F16)),
          put("w2", lambda t: torch.zeros(3, 20000, 8, dtype=F16))),
     r"fused_experts: backend 'ascendc' keeps 16 rows of the whole hidden \(H\) or intermediate \(I\) width in L1"),
]


def gdn_decode_step():
    """Hk 1, Hv 2, Dk 16, Dv 8, K 4: C = 48; three sequences, one of them padding."""
    return dict(mixed_qkv=_rand(3, 48), z=_rand(3, 16), b=_rand(3, 2), a=_rand(3, 2), conv_states=_rand(4, 3, 48),
                conv_taps=_rand(4, 48), ssm_states=_rand(4, 2, 16, 8), A_log=_rand(2), dt_bias=_rand(2),
                norm_weight=_rand(8), state_indices=torch.tensor([2, -1, 0]), eps=1e-6)


VALID["gdn_decode_step"] = gdn_decode_step
WRITES["gdn_decode_step"] = ("conv_states", "ssm_states")


def test_gdn_decode_step_valid_call_runs():
    """The positive control (registered after test_valid_call_runs was parametrized)."""
    call = gdn_decode_step()
    out = _C.ascendc_gdn_decode_step(**call)
    assert out.shape == (3, 16) and bool(torch.isfinite(out).all()) and not out[1].any()


def spec_decode_form(call):
    call.update(state_indices=torch.tensor([[0, 1], [2, 3]]), query_start_loc=torch.tensor([0, 2, 3]),
                num_accepted_tokens=torch.tensor([1, 2]))


CASES += [
    ("gdn_decode_step", "non-contiguous z", strided("z"), r"'z' must be contiguous"),
    ("gdn_decode_step", "non-contiguous ssm_states", strided("ssm_states"), r"'ssm_states' must be contiguous"),
    ("gdn_decode_step", "mixed_qkv float16", put("mixed_qkv", lambda t: t.to(F16)), r"'mixed_qkv' must be float32"),
    ("gdn_decode_step", "mixed_qkv a channel short", put("mixed_qkv", lambda t: t[:, :-1].contiguous()),
     r"'mixed_qkv' must be \[T, 2 Hk Dk \+ Hv Dv\]"),
    ("gdn_decode_step", "conv_taps for another C", put("conv_taps", lambda t: t[:, :-2].contiguous()),
     r"'conv_taps' must have shape \[4, 48\]"),
    ("gdn_decode_step", "norm_weight one short", put("norm_weight", lambda t: t[:-1]),
     r"'norm_weight' must have shape \[8\]"),
    ("gdn_decode_step", "state index past the pool", put("state_indices", lambda t: torch.tensor([2, -1, 4])),
     r"'state_indices' must be -1 or in \[0, 4\)"),
    ("gdn_decode_step", "state_indices float", put("state_indices", lambda t: t.float()),
     r"'state_indices' must be int32/int64"),
    ("gdn_decode_step", "eps 0", put("eps", lambda t: 0.0), r"'eps' must be finite and > 0"),
    ("gdn_decode_step", "spec without query_start_loc", many(spec_decode_form, put("query_start_loc", lambda t: None)),
     r"needs both 'query_start_loc' and 'num_accepted_tokens'"),
    ("gdn_decode_step", "spec query_start_loc short", many(spec_decode_form, put("query_start_loc", lambda t: t[:2])),
     r"'query_start_loc' must have shape \[3\]"),
    ("gdn_decode_step", "Dk 4096: no state tile fits the UB",
     many(put("mixed_qkv", lambda t: torch.zeros(3, 2 * 4096 + 16)), put("conv_taps", lambda t: torch.zeros(4, 8208)),
          put("conv_states", lambda t: torch.zeros(4, 3, 8208)), put("ssm_states", lambda t: torch.zeros(4, 2, 4096, 8))),
     r"gdn_decode_step: .* does not fit the unified-buffer budget"),
]


def test_chunk_checkpoints_valid_call_runs():
    """The positive control of checkpoint_boundaries: sequence 1 (69 tokens) has one whole chunk."""
    call = chunk_gated_delta_rule()
    o, final, checkpoints = _C.ascendc_chunk_gated_delta_rule(**call, checkpoint_boundaries=torch.tensor([[1, 1]]))
    assert checkpoints.shape == (1, 2, 16, 16) and bool(checkpoints.any()) and bool(torch.isfinite(checkpoints).all())
    assert _C.ascendc_chunk_gated_delta_rule(**chunk_gated_delta_rule())[2] is None


def boundaries(rows, dtype=torch.int64):
    """chunk_gated_delta_rule with checkpoint_boundaries: sequence 0 has 1 token, sequence 1 has 69."""
    return lambda call: call.update(checkpoint_boundaries=torch.tensor(rows, dtype=dtype))


CASES += [
    ("chunk_gated_delta_rule", "checkpoint_boundaries float", boundaries([[1, 1]], torch.float32),
     r"'checkpoint_boundaries' must be int32/int64 \[P, 2\]"),
    ("chunk_gated_delta_rule", "checkpoint_boundaries [P, 3]", boundaries([[1, 1, 0]]),
     r"'checkpoint_boundaries' must be int32/int64 \[P, 2\]"),
    ("chunk_gated_delta_rule", "checkpoint_boundaries non-contiguous",
     lambda call: call.update(checkpoint_boundaries=torch.tensor([[1, 7], [1, 1]]).t()),
     r"'checkpoint_boundaries' must be contiguous"),
    ("chunk_gated_delta_rule", "checkpoint sequence 2 of 2", boundaries([[2, 1]]),
     r"'checkpoint_boundaries' row 0 = \(2, 1\) names a sequence outside \[0, 2\)"),
    ("chunk_gated_delta_rule", "checkpoint sequence -1", boundaries([[1, 1], [-1, 1]]),
     r"'checkpoint_boundaries' row 1 = \(-1, 1\) names a sequence outside"),
    ("chunk_gated_delta_rule", "checkpoint j 0", boundaries([[1, 0]]),
     r"row 0 = \(1, 0\) must be a chunk boundary j >= 1 with 64 \* j <= the sequence's length 69"),
    ("chunk_gated_delta_rule", "checkpoint past a short sequence", boundaries([[0, 1]], torch.int32),
     r"row 0 = \(0, 1\) must be a chunk boundary j >= 1 with 64 \* j <= the sequence's length 1"),
    ("chunk_gated_delta_rule", "checkpoint j past int32", boundaries([[1, 2 ** 40]]),
     r"must be a chunk boundary j >= 1"),
    ("chunk_gated_delta_rule", "checkpoint row twice", boundaries([[1, 1], [1, 1]]),
     r"'checkpoint_boundaries' repeats the row \(1, 1\)"),
]


@pytest.mark.parametrize("name,what,mutate,match", CASES, ids=[f"{c[0]}:{c[1]}" for c in CASES])
def test_binding_rejects_bad_input_and_writes_nothing(name, what, mutate, match):
    call = VALID[name]()
    mutate(call)
    before = {k: call[k].clone() for k in WRITES.get(name, ())}
    with pytest.raises((RuntimeError, ValueError), match=match):
        getattr(_C, f"ascendc_{name}")(**call)
    for k, old in before.items():
        assert torch.equal(call[k], old), f"{name}: '{k}' was written"
