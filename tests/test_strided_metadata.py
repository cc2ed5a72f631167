"""Strided metadata is read by value, on every backend.

Index and parameter tensors often arrive as slices of bigger buffers (an
engine's persistent block table, a column of a metadata matrix). Each is
built here as every other element of a buffer whose gaps hold garbage, so a
backend that ignored the stride would read the garbage (out-of-range slots,
wrong lengths) and fail loudly or differ from the contiguous call.
"""
import pytest
import torch

import qwen_ops.ops as ops
from qwen_ops.testing import (Draw, cache_write_call, conv_fn_call, conv_update_call, decode_call, gdn_inputs,
                              mixed_call, offsets, state_pool)

F32 = torch.float32


def backends_for(op: str) -> list[str]:
    """The backends installed here that implement ``op``."""
    return [b for b in ops.available_backends() if b in ops._backend.IMPLEMENTATIONS[op]]


def strided(t: torch.Tensor, garbage) -> torch.Tensor:
    """``t`` as a non-contiguous view: every other element of a buffer filled with ``garbage``."""
    buf = torch.full((t.shape[0] * 2, *t.shape[1:]), garbage, dtype=t.dtype)
    buf[::2] = t
    view = buf[::2]
    assert not view.is_contiguous() and torch.equal(view, t)
    return view


def run_pair(call):
    dense, sliced = call(False), call(True)
    for a, b in zip(dense, sliced):
        assert torch.equal(a, b)


@pytest.mark.parametrize("backend", backends_for("reshape_and_cache"))
def test_reshape_and_cache(backend, gen):
    write = cache_write_call(Draw(gen), tokens=5, hkv=2, head_dim=64, block_size=16, num_blocks=4, dtype=F32,
                             cache_dtype=F32, cache_fill="zeros", padding=2)
    slots = write.pop("slot_mapping")

    def call(use_strided):
        caches = dict(key_cache=write["key_cache"].clone(), value_cache=write["value_cache"].clone())
        s = strided(slots, 10**6) if use_strided else slots
        ops.reshape_and_cache(write["key"], write["value"], slot_mapping=s, backend=backend, **caches)
        return caches["key_cache"], caches["value_cache"]

    run_pair(call)


@pytest.mark.parametrize("backend", backends_for("paged_decode_attention"))
def test_paged_decode_attention(backend, gen):
    decode = decode_call(Draw(gen), F32, F32, 4, 2, 64, 16, [20, 9])
    tables, lens = decode.pop("block_tables"), decode.pop("seq_lens")

    def call(use_strided):
        t = strided(tables, 99) if use_strided else tables
        n = strided(lens, 10**4) if use_strided else lens
        return (ops.paged_decode_attention(block_tables=t, seq_lens=n, backend=backend, **decode),)

    run_pair(call)


@pytest.mark.parametrize("backend", backends_for("mixed_attention"))
def test_mixed_attention(backend, gen):
    mixed = mixed_call(Draw(gen), F32, F32, 4, 2, 64, 16, [1, 5], [20, 12], 1)
    metadata = [mixed.pop(name) for name in ("block_tables", "query_start_loc", "seq_lens")]

    def call(use_strided):
        tables, starts, lens = (strided(x, 77) if use_strided else x for x in metadata)
        return (ops.mixed_attention(block_tables=tables, query_start_loc=starts, seq_lens=lens, backend=backend,
                                    **mixed),)

    run_pair(call)


@pytest.mark.parametrize("backend", backends_for("causal_conv1d_fn"))
def test_causal_conv1d_fn(backend, gen):
    conv = conv_fn_call(Draw(gen), [4, 5], 16, 4, F32, pool_rows=5, cache_indices=[3, 0],
                        has_initial_state=[True, False])
    pool = conv.pop("conv_states")
    metadata = [(conv.pop(name), garbage) for name, garbage in (("bias", 1e9), ("query_start_loc", 99),
                                                                 ("cache_indices", 7), ("has_initial_state", False))]

    def call_fn(use_strided):
        states = pool.clone()
        bias, starts, slots, fresh = (strided(t, g) if use_strided else t for t, g in metadata)
        out = ops.causal_conv1d_fn(bias=bias, conv_states=states, query_start_loc=starts, cache_indices=slots,
                                   has_initial_state=fresh, backend=backend, **conv)
        return out, states

    run_pair(call_fn)


@pytest.mark.parametrize("backend", backends_for("causal_conv1d_update"))
def test_causal_conv1d_update(backend, gen):
    conv = conv_update_call(Draw(gen), 16, 4, F32, pool_rows=5, cache_indices=[3, 0])
    pool, slots = conv.pop("conv_states"), conv.pop("cache_indices")

    def call_update(use_strided):
        states = pool.clone()
        idx = strided(slots, 7) if use_strided else slots
        return ops.causal_conv1d_update(conv_states=states, cache_indices=idx, backend=backend, **conv), states

    run_pair(call_update)


@pytest.mark.parametrize("op_name, backend", [
    (op, backend) for op in ("fused_recurrent_gated_delta_rule", "chunk_gated_delta_rule") for backend in backends_for(op)])
def test_gated_delta_rule(op_name, backend, gen):
    draw = Draw(gen)
    q, k, v, g, beta = gdn_inputs(draw, batch=1, tokens=9, hk=2, hv=4, dk=16, dv=16)
    pool0 = state_pool(draw, 3, 4, 16, 16)
    cu = offsets([4, 5])
    slots = torch.tensor([2, 0], dtype=torch.int32)
    has_state = torch.tensor([True, False])

    def call(use_strided):
        pool = pool0.clone()
        args = [strided(t, gv) if use_strided else t for t, gv in ((cu, 99), (slots, 9), (has_state, True))]
        o, _ = getattr(ops, op_name)(q, k, v, g, beta, initial_state=pool, cu_seqlens=args[0],
                                     ssm_state_indices=args[1], has_initial_state=args[2], backend=backend)
        return o, pool

    run_pair(call)
