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
    key, value = torch.randn(5, 2, 64, generator=gen), torch.randn(5, 2, 64, generator=gen)
    slots = torch.tensor([3, 17, -1, 40, 0])

    def call(use_strided):
        caches = torch.zeros(2, 4, 2, 16, 64)
        s = strided(slots, 10**6) if use_strided else slots
        ops.reshape_and_cache(key, value, caches[0], caches[1], s, backend=backend)
        return (caches,)

    run_pair(call)


@pytest.mark.parametrize("backend", backends_for("paged_decode_attention"))
def test_paged_decode_attention(backend, gen):
    kc, vc = torch.randn(6, 2, 16, 64, generator=gen), torch.randn(6, 2, 16, 64, generator=gen)
    query = torch.randn(2, 4, 64, generator=gen)
    tables = torch.tensor([[5, 1], [2, 0]], dtype=torch.int32)
    lens = torch.tensor([20, 9], dtype=torch.int32)

    def call(use_strided):
        t = strided(tables, 99) if use_strided else tables
        n = strided(lens, 10**4) if use_strided else lens
        return (ops.paged_decode_attention(query, kc, vc, t, n, backend=backend),)

    run_pair(call)


@pytest.mark.parametrize("backend", backends_for("mixed_attention"))
def test_mixed_attention(backend, gen):
    kc, vc = torch.randn(6, 2, 16, 64, generator=gen), torch.randn(6, 2, 16, 64, generator=gen)
    q, k, v = (torch.randn(6, h, 64, generator=gen) for h in (4, 2, 2))
    tables = torch.tensor([[5, 1], [2, 0]], dtype=torch.int32)
    starts = torch.tensor([0, 1, 6], dtype=torch.int32)
    lens = torch.tensor([20, 12], dtype=torch.int32)

    def call(use_strided):
        args = [strided(x, 77) if use_strided else x for x in (tables, starts, lens)]
        return (ops.mixed_attention(q, k, v, kc, vc, *args, 1, backend=backend),)

    run_pair(call)


def conv_inputs(gen):
    x, w = torch.randn(9, 16, generator=gen), torch.randn(16, 4, generator=gen)
    bias = torch.randn(16, generator=gen)
    starts = torch.tensor([0, 4, 9], dtype=torch.int32)
    slots = torch.tensor([3, 0], dtype=torch.int32)
    fresh = torch.tensor([True, False])
    return x, w, bias, starts, slots, fresh


@pytest.mark.parametrize("backend", backends_for("causal_conv1d_fn"))
def test_causal_conv1d_fn(backend, gen):
    x, w, bias, starts, slots, fresh = conv_inputs(gen)

    def call_fn(use_strided):
        pool = torch.randn(5, 3, 16, generator=torch.Generator().manual_seed(7))
        args = [strided(t, g) if use_strided else t for t, g in ((bias, 1e9), (starts, 99), (slots, 7), (fresh, False))]
        out = ops.causal_conv1d_fn(x, w, args[0], conv_states=pool, query_start_loc=args[1], cache_indices=args[2],
                                   has_initial_state=args[3], backend=backend)
        return out, pool

    run_pair(call_fn)


@pytest.mark.parametrize("backend", backends_for("causal_conv1d_update"))
def test_causal_conv1d_update(backend, gen):
    x, w, bias, _, slots, _ = conv_inputs(gen)

    def call_update(use_strided):
        pool = torch.randn(5, 3, 16, generator=torch.Generator().manual_seed(7))
        idx = strided(slots, 7) if use_strided else slots
        return ops.causal_conv1d_update(x[:2], pool, w, bias, cache_indices=idx, backend=backend), pool

    run_pair(call_update)


@pytest.mark.parametrize("op_name, backend", [
    (op, backend) for op in ("fused_recurrent_gated_delta_rule", "chunk_gated_delta_rule") for backend in backends_for(op)])
def test_gated_delta_rule(op_name, backend, gen):
    q, k = (torch.nn.functional.normalize(torch.randn(1, 9, 2, 16, generator=gen), dim=-1) for _ in range(2))
    v = torch.randn(1, 9, 4, 16, generator=gen)
    g = -torch.rand(1, 9, 4, generator=gen)
    beta = torch.rand(1, 9, 4, generator=gen)
    cu = torch.tensor([0, 4, 9], dtype=torch.int32)
    slots = torch.tensor([2, 0], dtype=torch.int32)
    has_state = torch.tensor([True, False])

    def call(use_strided):
        pool = torch.randn(3, 4, 16, 16, generator=torch.Generator().manual_seed(3))
        args = [strided(t, gv) if use_strided else t for t, gv in ((cu, 99), (slots, 9), (has_state, True))]
        o, _ = getattr(ops, op_name)(q, k, v, g, beta, initial_state=pool, cu_seqlens=args[0],
                                     ssm_state_indices=args[1], has_initial_state=args[2], backend=backend)
        return o, pool

    run_pair(call)
