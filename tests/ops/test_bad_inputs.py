"""Bad input to every public op: a clear exception naming the argument, and nothing written.

Each op has a builder of a valid call (its positive control runs it). A case
breaks one thing in a fresh valid call, snapshots every tensor argument,
expects ``ValueError``/``TypeError``/``BackendError`` whose message names the
culprit, and then checks that no argument -- caches and state pools above
all -- was modified.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import pytest
import torch

from qwen_ops import ops
from qwen_ops.ops import BackendError
from qwen_ops.ops._backend import IMPLEMENTATIONS
from qwen_ops.testing import Draw, paged_cache

F32, F16, BF16, I8, I32, I64 = torch.float32, torch.float16, torch.bfloat16, torch.int8, torch.int32, torch.int64


def randn(gen, *shape, dtype=F32):
    return torch.randn(*shape, generator=gen).to(dtype)


def int32(values):
    return torch.tensor(values, dtype=I32)


# ----------------------------------------------------------------------------- valid calls
# Small shapes: validation does not care about size. Each builder returns the
# keyword arguments of a call that must succeed.

NB, HKV, BS, D = 6, 2, 4, 8


def paged_caches(gen, int8: bool) -> dict:
    return paged_cache(Draw(gen), NB, HKV, BS, D, I8 if int8 else F32, int8="random")


def block_tables(gen, rows: int, width: int = 2):
    """[rows, width] int32 with distinct shuffled block ids in [0, NB)."""
    return torch.randperm(NB, generator=gen)[: rows * width].view(rows, width).to(I32)


def build_reshape_and_cache(gen, int8=False):
    t = 4
    return dict(key=randn(gen, t, HKV, D), value=randn(gen, t, HKV, D), **paged_caches(gen, int8),
                slot_mapping=int32([5, -1, 0, NB * BS - 1]), backend="torch")


def build_paged_decode_attention(gen, int8=False):
    # seq_lens 5 spans both blocks of its row (capacity 2 * 4 = 8); 0 is allowed.
    return dict(query=randn(gen, 3, 4, D), **paged_caches(gen, int8), block_tables=block_tables(gen, 3),
                seq_lens=int32([5, 1, 0]), backend="torch")


def build_prefill_attention(gen, int8=False, context=True):
    call = dict(query=randn(gen, 5, 4, D), key=randn(gen, 5, HKV, D), value=randn(gen, 5, HKV, D),
                cu_seqlens_q=int32([0, 2, 2, 5]), backend="torch")
    if context:
        caches = paged_caches(gen, int8)
        # context 5 spans both blocks of its row (capacity 2 * 4 = 8); 0 is allowed.
        call.update(caches, block_tables=block_tables(gen, 3), context_lens=int32([5, 0, 4]))
    return call


def build_mixed_attention(gen, int8=False):
    # One decode (1 row, 5 cached tokens), then prefills of 2 rows with 2 and 0 context tokens.
    return dict(query=randn(gen, 5, 4, D), key=randn(gen, 5, HKV, D), value=randn(gen, 5, HKV, D),
                **paged_caches(gen, int8), block_tables=block_tables(gen, 3), query_start_loc=int32([0, 1, 3, 5]),
                seq_lens=int32([5, 4, 2]), num_decodes=1, backend="torch")


HK, HV, DK, DV, POOL = 1, 2, 4, 8, 4


def build_delta_rule(gen, pool=True):
    if pool:  # two packed sequences, state rows 2 and 0 of a pool of 4
        b, t = 1, 5
        extra = dict(initial_state=randn(gen, POOL, HV, DK, DV), cu_seqlens=int32([0, 2, 5]),
                     ssm_state_indices=int32([2, 0]), has_initial_state=torch.tensor([True, False]))
    else:  # a batch of 2 sequences with their own initial states
        b, t = 2, 3
        extra = dict(initial_state=randn(gen, 2, HV, DK, DV))
    return dict(q=randn(gen, b, t, HK, DK), k=randn(gen, b, t, HK, DK), v=randn(gen, b, t, HV, DV),
                g=-torch.rand(b, t, HV, generator=gen), beta=torch.rand(b, t, HV, generator=gen),
                output_final_state=True, backend="torch", **extra)


C, K, STATES = 6, 4, 3


def build_causal_conv1d_fn(gen):
    return dict(x=randn(gen, 5, C), weight=randn(gen, C, K), bias=randn(gen, C),
                conv_states=randn(gen, STATES, K - 1, C), query_start_loc=int32([0, 2, 5]),
                cache_indices=int32([2, 0]), has_initial_state=torch.tensor([True, False]), backend="torch")


def build_causal_conv1d_update(gen):
    return dict(x=randn(gen, 2, C), conv_states=randn(gen, STATES, K - 1, C), weight=randn(gen, C, K),
                bias=randn(gen, C), cache_indices=int32([1, -1]), backend="torch")


def build_fused_gdn_gating(gen):
    return dict(A_log=randn(gen, 3), a=randn(gen, 4, 3), b=randn(gen, 4, 3), dt_bias=randn(gen, 3), backend="torch")


def build_kv_scales_from_absmax(gen):
    return dict(x=randn(gen, 3, HKV, D))


# name -> (public function, builder, tensors the op may write)
OPS: dict[str, tuple[Callable, Callable, tuple[str, ...]]] = {
    "reshape_and_cache": (ops.reshape_and_cache, build_reshape_and_cache, ("key_cache", "value_cache")),
    "reshape_and_cache/int8": (ops.reshape_and_cache, lambda g: build_reshape_and_cache(g, int8=True),
                               ("key_cache", "value_cache")),
    "paged_decode_attention": (ops.paged_decode_attention, build_paged_decode_attention, ()),
    "paged_decode_attention/int8": (ops.paged_decode_attention, lambda g: build_paged_decode_attention(g, True), ()),
    "prefill_attention": (ops.prefill_attention, build_prefill_attention, ()),
    "prefill_attention/int8": (ops.prefill_attention, lambda g: build_prefill_attention(g, int8=True), ()),
    "prefill_attention/no-cache": (ops.prefill_attention, lambda g: build_prefill_attention(g, context=False), ()),
    "mixed_attention": (ops.mixed_attention, build_mixed_attention, ()),
    "mixed_attention/int8": (ops.mixed_attention, lambda g: build_mixed_attention(g, int8=True), ()),
    "chunk_gated_delta_rule": (ops.chunk_gated_delta_rule, build_delta_rule, ("initial_state",)),
    "chunk_gated_delta_rule/dense": (ops.chunk_gated_delta_rule, lambda g: build_delta_rule(g, pool=False), ()),
    "fused_recurrent_gated_delta_rule": (ops.fused_recurrent_gated_delta_rule, build_delta_rule, ("initial_state",)),
    "fused_recurrent_gated_delta_rule/dense": (ops.fused_recurrent_gated_delta_rule,
                                               lambda g: build_delta_rule(g, pool=False), ()),
    "causal_conv1d_fn": (ops.causal_conv1d_fn, build_causal_conv1d_fn, ("conv_states",)),
    "causal_conv1d_update": (ops.causal_conv1d_update, build_causal_conv1d_update, ("conv_states",)),
    "fused_gdn_gating": (ops.fused_gdn_gating, build_fused_gdn_gating, ()),
    "kv_scales_from_absmax": (ops.kv_scales_from_absmax, build_kv_scales_from_absmax, ()),
}


def snapshot(call: dict) -> dict:
    """Copies of the tensor arguments that hold data (meta tensors have none to corrupt)."""
    return {name: t.clone() for name, t in call.items() if isinstance(t, torch.Tensor) and not t.is_meta}


def modified(call: dict, before: dict) -> list[str]:
    """Names of tensor arguments whose contents differ from the snapshot."""
    changed = []
    for name, old in before.items():
        new = call[name]
        if new.shape != old.shape or new.dtype != old.dtype or not torch.equal(new.isnan(), old.isnan()) \
                or not torch.equal(new.nan_to_num(), old.nan_to_num()):
            changed.append(name)
    return changed


@pytest.mark.parametrize("name", list(OPS))
def test_valid_call_works_and_writes_only_what_it_owns(gen, name):
    """Positive control: the unbroken call succeeds, so every failure below is the breakage's."""
    fn, build, written = OPS[name]
    call = build(gen)
    before = snapshot(call)
    result = fn(**call)
    assert result is None or isinstance(result, (torch.Tensor, tuple))
    # Writes happen where the op owns them (so the snapshot comparison can see one), nowhere else.
    assert set(modified(call, before)) == set(written)


# ----------------------------------------------------------------------------- breakages


def put(name, make):
    """Replace argument ``name`` by ``make(call)``."""
    def mutate(call):
        call[name] = make(call)
    return mutate


def poke(name, index, value):
    """Set one entry of a (copied) metadata tensor."""
    def mutate(call):
        call[name] = call[name].clone()
        call[name][index] = value
    return mutate


def all_of(*mutations):
    """Apply several breakages (e.g. key and value together, so only the intended check fails)."""
    def mutate(call):
        for m in mutations:
            m(call)
    return mutate


def retype(name, dtype):
    return put(name, lambda c: c[name].to(dtype))


def unsqueeze(name):
    return put(name, lambda c: c[name].unsqueeze(0))


def drop_last(name):
    return put(name, lambda c: c[name][:-1])


def non_contiguous(name):
    """Same shape and values, but a strided view."""
    return put(name, lambda c: torch.stack([c[name], c[name]], dim=-1)[..., 0])


def with_heads(name, heads, axis):
    """Same tensor with a different number of heads along ``axis``."""
    def make(call):
        t = call[name]
        shape = list(t.shape)
        shape[axis] = heads
        return torch.randn(shape).to(t.dtype)
    return put(name, make)


def zero_last_dim(*names):
    return all_of(*(put(n, lambda c, n=n: c[n][..., :0].contiguous()) for n in names))


def on_meta(name):
    return put(name, lambda c: c[name].to("meta"))


@dataclass
class Bad:
    op: str
    what: str
    mutate: Callable[[dict], None]
    error: type
    match: str

    @property
    def id(self):
        return f"{self.op}:{self.what}"


def cache_scale_cases(op: str, float_op: str, int8_op: str) -> list[Bad]:
    """Scales: needed by int8 caches, forbidden with float ones, float32 [Hkv, D] finite > 0."""
    return [
        Bad(int8_op, "missing k_scale", put("k_scale", lambda c: None), ValueError, "'k_scale'"),
        Bad(int8_op, "missing v_scale", put("v_scale", lambda c: None), ValueError, "'v_scale'"),
        Bad(float_op, "unexpected k_scale", put("k_scale", lambda c: torch.ones(HKV, D)), ValueError, "'k_scale'"),
        Bad(float_op, "unexpected v_scale", put("v_scale", lambda c: torch.ones(HKV, D)), ValueError, "'v_scale'"),
        Bad(int8_op, "k_scale shape", put("k_scale", lambda c: torch.ones(HKV)), ValueError, "'k_scale'"),
        Bad(int8_op, "v_scale transposed", put("v_scale", lambda c: torch.ones(D, HKV)), ValueError, "'v_scale'"),
        Bad(int8_op, "k_scale float16", retype("k_scale", F16), TypeError, "'k_scale'"),
        Bad(int8_op, "k_scale zero", poke("k_scale", (0, 3), 0.0), ValueError, "'k_scale'"),
        Bad(int8_op, "v_scale negative", poke("v_scale", (1, 0), -0.01), ValueError, "'v_scale'"),
        Bad(int8_op, "v_scale inf", poke("v_scale", (1, 1), float("inf")), ValueError, "'v_scale'"),
        Bad(int8_op, "k_scale nan", poke("k_scale", (0, 0), float("nan")), ValueError, "'k_scale'"),
    ]


def paged_cache_cases(op: str) -> list[Bad]:
    return [
        Bad(op, "block size 0", all_of(put("key_cache", lambda c: c["key_cache"][:, :, :0].contiguous()),
                                     put("value_cache", lambda c: c["value_cache"][:, :, :0].contiguous())),
            ValueError, "'key_cache'"),
        Bad(op, "key_cache rank", put("key_cache", lambda c: c["key_cache"].flatten(0, 1)), ValueError, "'key_cache'"),
        Bad(op, "key_cache int32", all_of(retype("key_cache", I32), retype("value_cache", I32)), TypeError,
            "'key_cache'"),
        Bad(op, "value_cache shape", put("value_cache", lambda c: c["value_cache"][:-1]), ValueError,
            "'value_cache'"),
        Bad(op, "value_cache dtype", retype("value_cache", F16), TypeError, "'value_cache'"),
        Bad(op, "caches not contiguous", all_of(non_contiguous("key_cache"), non_contiguous("value_cache")),
            ValueError, "'key_cache'"),
    ]


def block_table_cases(op: str, lens: str) -> list[Bad]:
    """``lens`` is the metadata whose tokens the block table must hold."""
    return [
        Bad(op, "block_tables int64", retype("block_tables", I64), TypeError, "'block_tables'"),
        Bad(op, "block_tables 1-D", put("block_tables", lambda c: c["block_tables"].flatten()), ValueError,
            "'block_tables'"),
        Bad(op, "block_tables rows", drop_last("block_tables"), ValueError, "'block_tables'"),
        Bad(op, "block id NB", poke("block_tables", (0, 0), NB), ValueError, "'block_tables'"),
        Bad(op, "block id -1 in use", poke("block_tables", (0, 1), -1), ValueError, "'block_tables'"),
        Bad(op, f"{lens} beyond the table", poke(lens, 0, 2 * BS + 1), ValueError, f"'{lens}'"),
        Bad(op, f"{lens} with an empty table", put("block_tables", lambda c: c["block_tables"][:, :0]),
            ValueError, f"'{lens}'"),
    ]


def attention_query_cases(op: str) -> list[Bad]:
    return [
        Bad(op, "query int32", retype("query", I32), TypeError, "'query'"),
        Bad(op, "query 2-D", put("query", lambda c: c["query"][:, 0]), ValueError, "'query'"),
        Bad(op, "Hq % Hkv != 0", with_heads("query", 3, 1), ValueError, "'query'"),
        Bad(op, "query head dim", put("query", lambda c: c["query"][..., :4].contiguous()), ValueError,
            "query head dim"),
        Bad(op, "query dtype vs cache", retype("query", F16), TypeError, "'query'"),
        Bad(op, "head dim 0", zero_last_dim("query"), ValueError, "'query'"),
    ]


def new_kv_cases(op: str) -> list[Bad]:
    return [
        Bad(op, "key rows", drop_last("key"), ValueError, "'key'"),
        Bad(op, "key head dim", put("key", lambda c: c["key"][..., :4].contiguous()), ValueError, "'key'"),
        Bad(op, "key 2-D", put("key", lambda c: c["key"][:, 0]), ValueError, "'key'"),
        Bad(op, "value shape", put("value", lambda c: c["value"][:, :1]), ValueError, "'value'"),
        Bad(op, "key dtype", all_of(retype("key", F16), retype("value", F16)), TypeError, "'key'"),
        Bad(op, "value int32", retype("value", I32), TypeError, "'value'"),
    ]


RC, RC8 = "reshape_and_cache", "reshape_and_cache/int8"
DEC, DEC8 = "paged_decode_attention", "paged_decode_attention/int8"
PRE, PRE8, PRE0 = "prefill_attention", "prefill_attention/int8", "prefill_attention/no-cache"
MIX, MIX8 = "mixed_attention", "mixed_attention/int8"
CHUNK, RECUR = "chunk_gated_delta_rule", "fused_recurrent_gated_delta_rule"
FN, UPD, GATE, ABSMAX = "causal_conv1d_fn", "causal_conv1d_update", "fused_gdn_gating", "kv_scales_from_absmax"

CASES: list[Bad] = [
    # ------------------------------------------------------------------ reshape_and_cache
    Bad(RC, "key int32", retype("key", I32), TypeError, "'key'"),
    Bad(RC, "key 2-D", put("key", lambda c: c["key"][:, 0]), ValueError, "'key'"),
    Bad(RC, "key heads vs cache", all_of(with_heads("key", 3, 1), with_heads("value", 3, 1)), ValueError, "key heads"),
    Bad(RC, "key head dim vs cache", all_of(with_heads("key", 16, 2), with_heads("value", 16, 2)), ValueError,
        "key head dim"),
    Bad(RC, "value rows", drop_last("value"), ValueError, "'value'"),
    Bad(RC, "value dtype", retype("value", F16), TypeError, "'value'"),
    Bad(RC, "key dtype vs float cache", all_of(retype("key", F16), retype("value", F16)), TypeError, "'key_cache'"),
    Bad(RC, "slot_mapping float", retype("slot_mapping", F32), TypeError, "'slot_mapping'"),
    Bad(RC, "slot_mapping 2-D", unsqueeze("slot_mapping"), ValueError, "'slot_mapping'"),
    Bad(RC, "slot_mapping length", drop_last("slot_mapping"), ValueError, "'slot_mapping'"),
    Bad(RC, "slot NB * Bs", poke("slot_mapping", 0, NB * BS), ValueError, "'slot_mapping'"),
    Bad(RC, "slot -2", poke("slot_mapping", 1, -2), ValueError, "'slot_mapping'"),
    Bad(RC, "duplicate slot", poke("slot_mapping", 3, 0), ValueError, "'slot_mapping'"),
    Bad(RC8, "duplicate slot", poke("slot_mapping", 0, 0), ValueError, "'slot_mapping'"),
    Bad(RC8, "slot out of range", poke("slot_mapping", 2, 10 ** 6), ValueError, "'slot_mapping'"),
    Bad(RC, "slot_mapping on another device", on_meta("slot_mapping"), ValueError, "'slot_mapping'"),
    Bad(RC, "value_cache is key_cache", put("value_cache", lambda c: c["key_cache"]), ValueError, "'value_cache'"),
    *paged_cache_cases(RC),
    *cache_scale_cases(RC, RC, RC8),
    # ------------------------------------------------------------------ paged_decode_attention
    *attention_query_cases(DEC),
    *paged_cache_cases(DEC),
    *block_table_cases(DEC, "seq_lens"),
    *block_table_cases(DEC8, "seq_lens"),
    *cache_scale_cases(DEC, DEC, DEC8),
    Bad(DEC, "seq_lens int64", retype("seq_lens", I64), TypeError, "'seq_lens'"),
    Bad(DEC, "seq_lens 2-D", unsqueeze("seq_lens"), ValueError, "'seq_lens'"),
    Bad(DEC, "seq_lens length", drop_last("seq_lens"), ValueError, "'seq_lens'"),
    Bad(DEC, "negative seq_lens", poke("seq_lens", 1, -1), ValueError, "'seq_lens'"),
    Bad(DEC, "seq_lens on another device", on_meta("seq_lens"), ValueError, "'seq_lens'"),
    # ------------------------------------------------------------------ prefill_attention
    *attention_query_cases(PRE),
    *paged_cache_cases(PRE),
    *block_table_cases(PRE, "context_lens"),
    *cache_scale_cases(PRE, PRE, PRE8),
    *new_kv_cases(PRE),
    *new_kv_cases(PRE0),
    Bad(PRE0, "query int32", retype("query", I32), TypeError, "'query'"),
    Bad(PRE0, "head dim 0", zero_last_dim("query", "key", "value"), ValueError, "'query'"),
    Bad(PRE0, "Hq % Hkv != 0", all_of(with_heads("key", 3, 1), with_heads("value", 3, 1)), ValueError, "'query'"),
    Bad(PRE, "key heads vs cache", all_of(with_heads("key", 1, 1), with_heads("value", 1, 1)), ValueError, "'key'"),
    Bad(PRE0, "cu_seqlens_q not ending at T", put("cu_seqlens_q", lambda c: int32([0, 2, 2, 4])), ValueError,
        "'cu_seqlens_q'"),
    Bad(PRE, "cu_seqlens_q past T", put("cu_seqlens_q", lambda c: int32([0, 2, 2, 6])), ValueError,
        "'cu_seqlens_q'"),
    Bad(PRE0, "cu_seqlens_q not from 0", put("cu_seqlens_q", lambda c: int32([1, 2, 2, 5])), ValueError,
        "'cu_seqlens_q'"),
    Bad(PRE, "cu_seqlens_q decreasing (negative length)", put("cu_seqlens_q", lambda c: int32([0, 3, 2, 5])),
        ValueError, "'cu_seqlens_q'"),
    Bad(PRE0, "cu_seqlens_q int64", retype("cu_seqlens_q", I64), TypeError, "'cu_seqlens_q'"),
    Bad(PRE0, "cu_seqlens_q 2-D", unsqueeze("cu_seqlens_q"), ValueError, "'cu_seqlens_q'"),
    Bad(PRE0, "cu_seqlens_q empty", put("cu_seqlens_q", lambda c: int32([])), ValueError, "'cu_seqlens_q'"),
    Bad(PRE, "context_lens int64", retype("context_lens", I64), TypeError, "'context_lens'"),
    Bad(PRE, "context_lens length", drop_last("context_lens"), ValueError, "'context_lens'"),
    Bad(PRE, "negative context_lens", poke("context_lens", 2, -3), ValueError, "'context_lens'"),
    Bad(PRE, "context_lens without block_tables", put("block_tables", lambda c: None), ValueError,
        "'block_tables'"),
    Bad(PRE, "context_lens without key_cache", put("key_cache", lambda c: None), ValueError, "'key_cache'"),
    Bad(PRE, "cache without context_lens", put("context_lens", lambda c: None), ValueError, "'key_cache'"),
    Bad(PRE0, "block_tables without context_lens", put("block_tables", lambda c: int32([[0], [1], [2]])),
        ValueError, "'block_tables'"),
    Bad(PRE0, "k_scale without context_lens", put("k_scale", lambda c: torch.ones(HKV, D)), ValueError,
        "'k_scale'"),
    Bad(PRE, "context_lens on another device", on_meta("context_lens"), ValueError, "'context_lens'"),
    # ------------------------------------------------------------------ mixed_attention
    *attention_query_cases(MIX),
    *paged_cache_cases(MIX),
    *block_table_cases(MIX, "seq_lens"),
    *cache_scale_cases(MIX, MIX, MIX8),
    *new_kv_cases(MIX),
    Bad(MIX, "num_decodes > N", put("num_decodes", lambda c: 4), ValueError, "'num_decodes'"),
    Bad(MIX, "negative num_decodes", put("num_decodes", lambda c: -1), ValueError, "'num_decodes'"),
    Bad(MIX, "decode with two rows", put("num_decodes", lambda c: 2), ValueError, "'query_start_loc'"),
    Bad(MIX, "seq_lens below the chunk", poke("seq_lens", 2, 1), ValueError, "'seq_lens'"),
    Bad(MIX, "negative seq_lens", poke("seq_lens", 0, -1), ValueError, "'seq_lens'"),
    Bad(MIX, "seq_lens int64", retype("seq_lens", I64), TypeError, "'seq_lens'"),
    Bad(MIX, "seq_lens length", drop_last("seq_lens"), ValueError, "'seq_lens'"),
    Bad(MIX, "query_start_loc not ending at T", put("query_start_loc", lambda c: int32([0, 1, 3, 4])), ValueError,
        "'query_start_loc'"),
    Bad(MIX, "query_start_loc decreasing", put("query_start_loc", lambda c: int32([0, 1, 0, 5])), ValueError,
        "'query_start_loc'"),
    Bad(MIX, "query_start_loc int64", retype("query_start_loc", I64), TypeError, "'query_start_loc'"),
    Bad(MIX, "query_start_loc 2-D", unsqueeze("query_start_loc"), ValueError, "'query_start_loc'"),
    Bad(MIX, "block_tables on another device", on_meta("block_tables"), ValueError, "'block_tables'"),
    # ------------------------------------------------------------------ conv
    Bad(FN, "x 1-D", put("x", lambda c: c["x"].flatten()), ValueError, "'x'"),
    Bad(FN, "x int32", retype("x", I32), TypeError, "'x'"),
    Bad(FN, "weight channels", put("weight", lambda c: c["weight"][:-1]), ValueError, "'weight'"),
    Bad(FN, "weight width 1", all_of(put("weight", lambda c: c["weight"][:, :1]),
                                   put("conv_states", lambda c: c["conv_states"][:, :0])), ValueError, "'weight'"),
    Bad(FN, "weight 3-D", unsqueeze("weight"), ValueError, "'weight'"),
    Bad(FN, "bias shape", put("bias", lambda c: c["bias"][:-1]), ValueError, "'bias'"),
    Bad(FN, "bias int32", retype("bias", I32), TypeError, "'bias'"),
    Bad(FN, "conv_states width", put("conv_states", lambda c: c["conv_states"][:, 1:]), ValueError,
        "'conv_states'"),
    Bad(FN, "conv_states int8", retype("conv_states", I8), TypeError, "'conv_states'"),
    Bad(FN, "conv_states not contiguous", non_contiguous("conv_states"), ValueError, "'conv_states'"),
    Bad(FN, "activation relu", put("activation", lambda c: "relu"), ValueError, "'activation'"),
    Bad(FN, "query_start_loc not ending at T", put("query_start_loc", lambda c: int32([0, 2, 4])), ValueError,
        "'query_start_loc'"),
    Bad(FN, "query_start_loc decreasing", put("query_start_loc", lambda c: int32([0, 6, 5])), ValueError,
        "'query_start_loc'"),
    Bad(FN, "query_start_loc float", retype("query_start_loc", F32), TypeError, "'query_start_loc'"),
    Bad(FN, "query_start_loc 2-D", unsqueeze("query_start_loc"), ValueError, "'query_start_loc'"),
    Bad(FN, "cache_indices out of range", poke("cache_indices", 0, STATES), ValueError, "'cache_indices'"),
    Bad(FN, "cache_indices -2", poke("cache_indices", 1, -2), ValueError, "'cache_indices'"),
    Bad(FN, "duplicate cache_indices", poke("cache_indices", 1, 2), ValueError, "'cache_indices'"),
    Bad(FN, "cache_indices length", drop_last("cache_indices"), ValueError, "'cache_indices'"),
    Bad(FN, "cache_indices float", retype("cache_indices", F32), TypeError, "'cache_indices'"),
    Bad(FN, "has_initial_state int32", retype("has_initial_state", I32), TypeError, "'has_initial_state'"),
    Bad(FN, "has_initial_state length", drop_last("has_initial_state"), ValueError, "'has_initial_state'"),
    Bad(FN, "cache_indices on another device", on_meta("cache_indices"), ValueError, "'cache_indices'"),
    Bad(UPD, "x 3-D", unsqueeze("x"), ValueError, "'x'"),
    Bad(UPD, "x float64", retype("x", torch.float64), TypeError, "'x'"),
    Bad(UPD, "weight channels", put("weight", lambda c: c["weight"][:-1]), ValueError, "'weight'"),
    Bad(UPD, "bias shape", put("bias", lambda c: c["bias"][:-1]), ValueError, "'bias'"),
    Bad(UPD, "conv_states width", put("conv_states", lambda c: c["conv_states"][:, 1:]), ValueError,
        "'conv_states'"),
    Bad(UPD, "conv_states 2-D", put("conv_states", lambda c: c["conv_states"][0]), ValueError, "'conv_states'"),
    Bad(UPD, "activation gelu", put("activation", lambda c: "gelu"), ValueError, "'activation'"),
    Bad(UPD, "cache_indices out of range", poke("cache_indices", 0, STATES), ValueError, "'cache_indices'"),
    Bad(UPD, "cache_indices -2", poke("cache_indices", 1, -2), ValueError, "'cache_indices'"),
    Bad(UPD, "duplicate cache_indices", put("cache_indices", lambda c: int32([1, 1])), ValueError,
        "'cache_indices'"),
    Bad(UPD, "cache_indices length", drop_last("cache_indices"), ValueError, "'cache_indices'"),
    Bad(UPD, "cache_indices bool", retype("cache_indices", torch.bool), TypeError, "'cache_indices'"),
    # ------------------------------------------------------------------ fused_gdn_gating
    Bad(GATE, "a 1-D", put("a", lambda c: c["a"][0]), ValueError, "'a'"),
    Bad(GATE, "a int32", retype("a", I32), TypeError, "'a'"),
    Bad(GATE, "b shape", put("b", lambda c: c["b"][:, :2]), ValueError, "'b'"),
    Bad(GATE, "b int32", retype("b", I32), TypeError, "'b'"),
    Bad(GATE, "A_log shape", put("A_log", lambda c: c["A_log"][:2]), ValueError, "'A_log'"),
    Bad(GATE, "A_log int64", retype("A_log", I64), TypeError, "'A_log'"),
    Bad(GATE, "dt_bias shape", unsqueeze("dt_bias"), ValueError, "'dt_bias'"),
    Bad(GATE, "dt_bias on another device", on_meta("dt_bias"), ValueError, "'dt_bias'"),
    # ------------------------------------------------------------------ kv_scales_from_absmax
    Bad(ABSMAX, "x int8", retype("x", I8), TypeError, "'x'"),
    Bad(ABSMAX, "x 1-D", put("x", lambda c: c["x"][0, 0]), ValueError, "'x'"),
    Bad(ABSMAX, "x empty", put("x", lambda c: c["x"][:0]), ValueError, "'x'"),
    Bad(ABSMAX, "x holds nan", poke("x", (1, 0, 2), float("nan")), ValueError, "'x'"),
    Bad(ABSMAX, "x holds inf", poke("x", (0, 1, 0), float("-inf")), ValueError, "'x'"),
    Bad(ABSMAX, "x a list", put("x", lambda c: c["x"].tolist()), TypeError, "'x'"),
]


def delta_rule_cases(op: str) -> list[Bad]:
    dense = f"{op}/dense"
    return [
        Bad(op, "q 3-D", put("q", lambda c: c["q"][0]), ValueError, "'q'"),
        Bad(op, "q int32", retype("q", I32), TypeError, "'q'"),
        Bad(op, "k head dim", put("k", lambda c: torch.randn(1, 5, HK, DK + 1)), ValueError, "'k'"),
        Bad(op, "v tokens", put("v", lambda c: c["v"][:, :-1]), ValueError, "'v'"),
        Bad(op, "v dtype", retype("v", F16), TypeError, "'v'"),
        Bad(op, "Hv % Hk != 0", all_of(with_heads("q", 3, 2), with_heads("k", 3, 2)), ValueError, "'v'"),
        Bad(op, "g bfloat16", retype("g", BF16), TypeError, "'g'"),
        Bad(op, "g shape", put("g", lambda c: c["g"][..., :1]), ValueError, "'g'"),
        Bad(op, "beta shape", unsqueeze("beta"), ValueError, "'beta'"),
        Bad(op, "beta int32", retype("beta", I32), TypeError, "'beta'"),
        Bad(op, "cu_seqlens not ending at T", put("cu_seqlens", lambda c: int32([0, 2, 4])), ValueError,
            "'cu_seqlens'"),
        Bad(op, "cu_seqlens decreasing", put("cu_seqlens", lambda c: int32([0, 6, 5])), ValueError, "'cu_seqlens'"),
        Bad(op, "cu_seqlens float", retype("cu_seqlens", F32), TypeError, "'cu_seqlens'"),
        Bad(dense, "cu_seqlens with B = 2", put("cu_seqlens", lambda c: int32([0, 1, 3])), ValueError,
            "'cu_seqlens'"),
        Bad(op, "ssm_state_indices out of range", poke("ssm_state_indices", 1, POOL), ValueError,
            "'ssm_state_indices'"),
        Bad(op, "ssm_state_indices -2", poke("ssm_state_indices", 0, -2), ValueError, "'ssm_state_indices'"),
        Bad(op, "duplicate ssm_state_indices", poke("ssm_state_indices", 1, 2), ValueError, "'ssm_state_indices'"),
        Bad(op, "ssm_state_indices length", drop_last("ssm_state_indices"), ValueError, "'ssm_state_indices'"),
        Bad(op, "ssm_state_indices float", retype("ssm_state_indices", F32), TypeError, "'ssm_state_indices'"),
        Bad(op, "ssm_state_indices without a pool", put("initial_state", lambda c: None), ValueError,
            "'ssm_state_indices'"),
        Bad(op, "pool head dim", put("initial_state", lambda c: torch.randn(POOL, HV, DK + 1, DV)), ValueError,
            "'initial_state'"),
        Bad(op, "pool bfloat16", retype("initial_state", BF16), TypeError, "'initial_state'"),
        Bad(op, "pool not contiguous", non_contiguous("initial_state"), ValueError, "'initial_state'"),
        Bad(dense, "initial_state rows", drop_last("initial_state"), ValueError, "'initial_state'"),
        Bad(op, "has_initial_state int32", retype("has_initial_state", I32), TypeError, "'has_initial_state'"),
        Bad(op, "has_initial_state length", drop_last("has_initial_state"), ValueError, "'has_initial_state'"),
        Bad(dense, "has_initial_state without initial_state",
            all_of(put("initial_state", lambda c: None),
                   put("has_initial_state", lambda c: torch.tensor([True, True]))),
            ValueError, "'has_initial_state'"),
        Bad(op, "ssm_state_indices on another device", on_meta("ssm_state_indices"), ValueError,
            "'ssm_state_indices'"),
    ]


CASES += delta_rule_cases(CHUNK) + delta_rule_cases(RECUR)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input_names_the_argument_and_writes_nothing(gen, case):
    fn, build, _ = OPS[case.op]
    call = build(gen)
    case.mutate(call)
    before = snapshot(call)
    with pytest.raises(case.error, match=case.match):
        fn(**call)
    assert modified(call, before) == []


# ----------------------------------------------------------------------------- backends

BACKEND_OPS = [name for name in OPS if name != ABSMAX and "/" not in name]
ASCENDC_BUILT = "ascendc" in ops.available_backends()


def backend_cases():
    """(op, backend argument, environment changes (None = unset), expected message) that must fail here."""
    for name in BACKEND_OPS:
        yield pytest.param(name, "cuda", {}, "backend 'cuda'", id=f"{name}:unknown")
        yield pytest.param(name, None, {"QWEN_OPS_BACKEND": "tpu"}, "backend 'tpu'",
                           id=f"{name}:unknown-from-QWEN_OPS_BACKEND")
        # _backend reads TRITON_INTERPRET at call time, so unsetting it here is enough.
        yield pytest.param(name, "triton", {"TRITON_INTERPRET": None}, "backend 'triton'",
                           id=f"{name}:triton-on-cpu-uninterpreted")
        # Ascend C fails where the op has no Ascend C kernel, or where the extension lacks the kernels
        # (its CPU stand-in serves CPU tensors when built).
        if "ascendc" not in IMPLEMENTATIONS[name] or not ASCENDC_BUILT:
            yield pytest.param(name, "ascendc", {}, "backend 'ascendc'", id=f"{name}:ascendc-cannot-serve")


@pytest.mark.parametrize("name,backend,environment,message", list(backend_cases()))
def test_backend_that_cannot_serve(gen, monkeypatch, name, backend, environment, message):
    for variable, value in environment.items():
        if value is None:
            monkeypatch.delenv(variable, raising=False)
        else:
            monkeypatch.setenv(variable, value)
    fn, build, _ = OPS[name]
    call = dict(build(gen), backend=backend)
    before = snapshot(call)
    with pytest.raises(BackendError, match=message):
        fn(**call)
    assert modified(call, before) == []



@pytest.mark.parametrize("scale", [float("inf"), float("nan"), 0.0, -1.0])
def test_scale_must_be_finite_and_positive(scale):
    kc = torch.randn(2, 1, 16, 64)
    q = torch.randn(1, 2, 64)
    args = (q, kc, kc.clone(), torch.tensor([[0]], dtype=torch.int32), torch.tensor([3], dtype=torch.int32))
    with pytest.raises(ValueError, match="paged_decode_attention: argument 'scale'"):
        ops.paged_decode_attention(*args, scale=scale)
    x = torch.randn(1, 3, 2, 16)
    with pytest.raises(ValueError, match="chunk_gated_delta_rule: argument 'scale'"):
        ops.chunk_gated_delta_rule(x, x, x, -torch.rand(1, 3, 2), torch.rand(1, 3, 2), scale=scale)


def test_quantize_helpers_check_their_scale():
    x = torch.randn(4, 2, 8)
    with pytest.raises(ValueError, match="quantize_int8: argument 'scale' must be finite and > 0"):
        ops.quantize_int8(x, torch.zeros(2, 8))
    with pytest.raises(ValueError, match=r"quantize_int8: argument 'scale' must have shape|must be 2-D"):
        ops.quantize_int8(x, torch.ones(8))
    with pytest.raises(TypeError, match="dequantize_int8: argument 'q'"):
        ops.dequantize_int8(x, torch.ones(2, 8))
    scale = torch.rand(2, 8) + 0.01
    assert torch.equal(ops.dequantize_int8(ops.quantize_int8(x, scale), scale),
                       ops.quantize_int8(x, scale).float() * scale)
