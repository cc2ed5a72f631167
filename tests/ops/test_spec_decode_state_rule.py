"""The speculative-decoding state rule of the GDN ops, against a sequential float64 reference.

With k drafts, each request owns 1 + k state rows; a step of L <= 1 + k tokens
writes the state after its t-th token to row t and the next step starts from
row num_accepted - 1. Over several steps with random accept patterns, the
outputs of every accepted token and the state the last step leaves must equal
a plain sequential run over the accepted tokens only, for
``fused_recurrent_gated_delta_rule`` and ``causal_conv1d_update`` on the torch
and Triton backends (Triton under its CPU interpreter here).
"""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from test_conv_reference import conv_float64
from test_gdn_reference import delta_rule_float64
from tolerances import KERNEL_VS_REFERENCE, tol

import qwen_ops.ops as ops

F32 = torch.float32
BACKENDS = [b for b in ("torch", "triton") if b in ops.available_backends()]


def plan_steps(gen, num_requests, k, num_steps):
    """Per step and request: L tokens (1..1+k; 0 marks a padding row) and how many are accepted (1..L)."""
    steps = []
    for _ in range(num_steps):
        step = []
        for _ in range(num_requests):
            length = int(torch.randint(1, k + 2, (1,), generator=gen))
            step.append((length, int(torch.randint(1, length + 1, (1,), generator=gen))))
        steps.append(step)
    return steps


def state_rows(gen, num_requests, width, pool_rows):
    """Distinct pool rows per request, drawn at random from the pool: [R, W] int32."""
    return torch.randperm(pool_rows, generator=gen)[: num_requests * width].view(num_requests, width).to(torch.int32)


def with_padding(table, lengths, accepted, pad_at):
    """Insert a padding row (all -1, no tokens) at position ``pad_at`` of the step's batch."""
    pad = torch.full((1, table.shape[1]), -1, dtype=table.dtype)
    return (torch.cat([table[:pad_at], pad, table[pad_at:]]), lengths[:pad_at] + [0] + lengths[pad_at:],
            accepted[:pad_at] + [1] + accepted[pad_at:])


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("k", [1, 3])
def test_gdn_rows_per_token_equal_a_sequential_run_of_the_accepted_tokens(gen, backend, k):
    num_requests, width, hk, hv, dk, dv = 3, k + 1, 2, 4, 16, 32
    pool_rows = num_requests * width + 3
    table = state_rows(gen, num_requests, width, pool_rows)
    pool = torch.zeros(pool_rows, hv, dk, dv)
    start = torch.randn(num_requests, hv, dk, dv, generator=gen) * 0.3
    pool[table[:, 0].long()] = start  # the first step starts from column 0 (num_accepted = 1)
    accepted_prev = [1] * num_requests
    history = [[] for _ in range(num_requests)]  # (q, k, v, g, beta, output) of every accepted token
    for step in plan_steps(gen, num_requests, k, num_steps=5):
        lengths = [length for length, _ in step]
        total = sum(lengths)
        q = torch.randn(1, total, hk, dk, generator=gen)
        kk = F.normalize(torch.randn(1, total, hk, dk, generator=gen), dim=-1)
        v = torch.randn(1, total, hv, dv, generator=gen)
        g = F.logsigmoid(2.0 + torch.randn(1, total, hv, generator=gen))
        beta = torch.rand(1, total, hv, generator=gen) * 0.9 + 0.05
        batch_table, batch_lengths, batch_accepted = with_padding(table, lengths, accepted_prev, pad_at=1)
        cu = torch.tensor([0] + torch.tensor(batch_lengths).cumsum(0).tolist(), dtype=torch.int32)
        pool_before = pool.clone()
        o, final = ops.fused_recurrent_gated_delta_rule(
            q, kk, v, g, beta, initial_state=pool, output_final_state=True, cu_seqlens=cu,
            ssm_state_indices=batch_table, num_accepted_tokens=torch.tensor(batch_accepted, dtype=torch.int32),
            backend=backend)
        unused = torch.ones(pool_rows, dtype=torch.bool)
        unused[table.flatten().long()] = False
        assert torch.equal(pool[unused], pool_before[unused]), "a row no request owns was written"
        assert torch.equal(final[1], torch.zeros_like(final[1])), "the padding row produced a state"
        offset = 0
        for r, (length, accepted) in enumerate(step):
            for t in range(accepted):
                i = offset + t
                history[r].append((q[0, i], kk[0, i], v[0, i], g[0, i], beta[0, i], o[0, i]))
            offset += length
        accepted_prev = [accepted for _, accepted in step]

    for r in range(num_requests):
        q, kk, v, g, beta, o = (torch.stack(parts) for parts in zip(*history[r]))
        want_o, want_state = delta_rule_float64(q, kk, v, g, beta, dk ** -0.5, start[r], l2norm=False)
        torch.testing.assert_close(o.double(), want_o, **tol(KERNEL_VS_REFERENCE, F32))
        last = table[r, accepted_prev[r] - 1]
        torch.testing.assert_close(pool[last].double(), want_state, **tol(KERNEL_VS_REFERENCE, F32))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("k", [1, 3])
@pytest.mark.parametrize("width_k", [2, 4])
def test_conv_rows_per_token_equal_a_sequential_run_of_the_accepted_tokens(gen, backend, k, width_k):
    num_requests, channels, width = 3, 40, k + 1
    pool_rows = num_requests * width + 2
    table = state_rows(gen, num_requests, width, pool_rows)
    weight = torch.randn(channels, width_k, generator=gen)
    bias = torch.randn(channels, generator=gen)
    states = torch.zeros(pool_rows, width_k - 1, channels)
    start = torch.randn(num_requests, width_k - 1, channels, generator=gen)
    states[table[:, 0].long()] = start
    accepted_prev = [1] * num_requests
    accepted_x = [[] for _ in range(num_requests)]
    accepted_out = [[] for _ in range(num_requests)]
    for step in plan_steps(gen, num_requests, k, num_steps=6):
        lengths = [length for length, _ in step]
        x = torch.randn(sum(lengths), channels, generator=gen)
        batch_table, batch_lengths, batch_accepted = with_padding(table, lengths, accepted_prev, pad_at=3)
        qsl = torch.tensor([0] + torch.tensor(batch_lengths).cumsum(0).tolist(), dtype=torch.int32)
        before = states.clone()
        out = ops.causal_conv1d_update(x, states, weight, bias, cache_indices=batch_table, activation="silu",
                                       query_start_loc=qsl,
                                       num_accepted_tokens=torch.tensor(batch_accepted, dtype=torch.int32),
                                       backend=backend)
        unused = torch.ones(pool_rows, dtype=torch.bool)
        unused[table.flatten().long()] = False
        assert torch.equal(states[unused], before[unused]), "a row no request owns was written"
        offset = 0
        for r, (length, accepted) in enumerate(step):
            accepted_x[r].append(x[offset:offset + accepted])
            accepted_out[r].append(out[offset:offset + accepted])
            offset += length
        accepted_prev = [accepted for _, accepted in step]

    for r in range(num_requests):
        want_out, want_state = conv_float64(torch.cat(accepted_x[r]), start[r], weight, bias, "silu")
        torch.testing.assert_close(torch.cat(accepted_out[r]).double(), want_out, **tol(KERNEL_VS_REFERENCE, F32))
        last = table[r, accepted_prev[r] - 1]
        torch.testing.assert_close(states[last].double(), want_state, **tol(KERNEL_VS_REFERENCE, F32))


def _gdn_call(table, accepted, cu, **overrides):
    total = int(cu[-1])
    args = dict(q=torch.randn(1, total, 2, 16), k=torch.randn(1, total, 2, 16), v=torch.randn(1, total, 2, 16),
                g=-torch.rand(1, total, 2), beta=torch.rand(1, total, 2), initial_state=torch.zeros(8, 2, 16, 16),
                cu_seqlens=cu, ssm_state_indices=table, num_accepted_tokens=accepted)
    args.update(overrides)
    q, k, v, g, beta = (args.pop(n) for n in ("q", "k", "v", "g", "beta"))
    return ops.fused_recurrent_gated_delta_rule(q, k, v, g, beta, backend="torch", **args)


def test_gdn_spec_decode_bad_arguments_are_named():
    i32 = dict(dtype=torch.int32)
    table = torch.tensor([[0, 1, 2], [3, 4, 5]], **i32)
    cu = torch.tensor([0, 3, 5], **i32)
    acc = torch.tensor([1, 3], **i32)
    _gdn_call(table, acc, cu)  # valid
    with pytest.raises(ValueError, match="needs both 'ssm_state_indices'.*'num_accepted_tokens'"):
        _gdn_call(table, None, cu)
    with pytest.raises(ValueError, match=r"'num_accepted_tokens' must be in \[1, 3\]"):
        _gdn_call(table, torch.tensor([0, 1], **i32), cu)
    with pytest.raises(ValueError, match=r"'num_accepted_tokens' must be in \[1, 3\]"):
        _gdn_call(table, torch.tensor([1, 4], **i32), cu)
    with pytest.raises(ValueError, match="has 4 tokens but 'ssm_state_indices' has only 3"):
        _gdn_call(table, acc, torch.tensor([0, 4, 5], **i32))
    with pytest.raises(ValueError, match="has -1 where a sequence reads"):
        _gdn_call(torch.tensor([[0, 1, -1], [3, 4, 5]], **i32), acc, cu)
    with pytest.raises(ValueError, match="has -1 where a sequence reads"):
        _gdn_call(torch.tensor([[0, 1, 2], [3, 4, -1]], **i32), acc, cu)  # reads column 2
    with pytest.raises(ValueError, match="repeats an index"):
        _gdn_call(torch.tensor([[0, 1, 2], [3, 4, 0]], **i32), acc, cu)
    with pytest.raises(ValueError, match=r"'num_accepted_tokens' must have shape"):
        _gdn_call(table, torch.tensor([1], **i32), cu)
    with pytest.raises(TypeError, match="'num_accepted_tokens' must have dtype"):
        _gdn_call(table, acc.float(), cu)
    with pytest.raises(ValueError, match="'ssm_state_indices' needs 'initial_state'"):
        _gdn_call(table, acc, cu, initial_state=None)
    # A padding row (all -1, no tokens) is fine.
    _gdn_call(torch.tensor([[0, 1, 2], [-1, -1, -1]], **i32), acc, torch.tensor([0, 3, 3], **i32))
    # The chunked op has no such form.
    with pytest.raises(ValueError, match="taken by fused_recurrent_gated_delta_rule only"):
        torch.ops.qwen_ops.chunk_gated_delta_rule(
            torch.randn(1, 5, 2, 16), torch.randn(1, 5, 2, 16), torch.randn(1, 5, 2, 16), -torch.rand(1, 5, 2),
            torch.rand(1, 5, 2), None, torch.zeros(8, 2, 16, 16), False, cu, table, None, False, "torch", acc)


def test_conv_spec_decode_bad_arguments_are_named():
    i32 = dict(dtype=torch.int32)
    states, weight = torch.zeros(8, 3, 4), torch.randn(4, 4)
    table = torch.tensor([[0, 1], [2, 3]], **i32)
    qsl, acc = torch.tensor([0, 2, 3], **i32), torch.tensor([2, 1], **i32)

    def call(x=None, cache_indices=table, query_start_loc=qsl, num_accepted_tokens=acc):
        x = torch.randn(int(query_start_loc[-1]) if query_start_loc is not None else 3, 4) if x is None else x
        return ops.causal_conv1d_update(x, states, weight, cache_indices=cache_indices, backend="torch",
                                        query_start_loc=query_start_loc, num_accepted_tokens=num_accepted_tokens)

    call()
    with pytest.raises(ValueError, match="needs both 'query_start_loc'.*'num_accepted_tokens'"):
        call(num_accepted_tokens=None)
    with pytest.raises(ValueError, match=r"'cache_indices' must be 2-D"):
        call(cache_indices=table[:, 0])
    with pytest.raises(ValueError, match=r"'num_accepted_tokens' must be in \[1, 2\]"):
        call(num_accepted_tokens=torch.tensor([3, 1], **i32))
    with pytest.raises(ValueError, match="has 3 tokens but 'cache_indices' has only 2"):
        call(query_start_loc=torch.tensor([0, 3, 3], **i32))
    with pytest.raises(ValueError, match="has -1 where a sequence reads"):
        call(cache_indices=torch.tensor([[0, -1], [2, 3]], **i32))
    with pytest.raises(ValueError, match="'query_start_loc' must end at the number of tokens"):
        call(x=torch.randn(5, 4))


@pytest.mark.skipif("ascendc" not in ops.available_backends(), reason="qwen_ops._C built without Ascend C kernels")
def test_ascendc_refuses_the_spec_decode_form():
    i32 = dict(dtype=torch.int32)
    table, acc = torch.tensor([[0, 1]], **i32), torch.tensor([1], **i32)
    with pytest.raises(ops.BackendError, match="backend 'ascendc' has no speculative-decoding form"):
        ops.causal_conv1d_update(torch.randn(2, 16), torch.zeros(4, 3, 16), torch.randn(16, 4), cache_indices=table,
                                 query_start_loc=torch.tensor([0, 2], **i32), num_accepted_tokens=acc,
                                 backend="ascendc")
    with pytest.raises(ops.BackendError, match="backend 'ascendc' has no speculative-decoding form"):
        ops.fused_recurrent_gated_delta_rule(
            torch.randn(1, 2, 2, 16), torch.randn(1, 2, 2, 16), torch.randn(1, 2, 2, 16), -torch.rand(1, 2, 2),
            torch.rand(1, 2, 2), initial_state=torch.zeros(4, 2, 16, 16), cu_seqlens=torch.tensor([0, 2], **i32),
            ssm_state_indices=table, num_accepted_tokens=acc, backend="ascendc")


@pytest.mark.parametrize("backend", BACKENDS)
def test_spec_decode_forms_compile_with_their_fakes(backend):
    i32 = dict(dtype=torch.int32)
    table, acc, cu = torch.tensor([[0, 1], [2, 3]], **i32), torch.tensor([2, 1], **i32), torch.tensor([0, 2, 3], **i32)
    x, states, weight = torch.randn(3, 16), torch.randn(4, 3, 16), torch.randn(16, 4)
    pool = torch.randn(4, 2, 16, 16)
    q, k, v = (F.normalize(torch.randn(1, 3, 2, 16), dim=-1) for _ in range(3))
    g, beta = -torch.rand(1, 3, 2), torch.rand(1, 3, 2)

    def step(x, states, pool):
        y = ops.causal_conv1d_update(x, states, weight, cache_indices=table, query_start_loc=cu,
                                     num_accepted_tokens=acc, backend=backend)
        o, _ = ops.fused_recurrent_gated_delta_rule(q, k, v, g, beta, initial_state=pool, cu_seqlens=cu,
                                                    ssm_state_indices=table, num_accepted_tokens=acc,
                                                    backend=backend)
        return y, o

    eager_states, eager_pool = states.clone(), pool.clone()
    want = step(x, eager_states, eager_pool)
    got = torch.compile(step, fullgraph=True, backend="eager")(x, states, pool)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b)
    torch.testing.assert_close(states, eager_states)
    torch.testing.assert_close(pool, eager_pool)


@pytest.mark.parametrize("backend", BACKENDS)
def test_one_column_is_the_plain_decode_update(gen, backend):
    """W = 1 (no drafts), num_accepted = 1: the spec form computes exactly the 1-D pool update."""
    i32 = dict(dtype=torch.int32)
    slots = torch.tensor([4, 0, 2], **i32)
    q, k, v = (F.normalize(torch.randn(3, 1, 2, 16, generator=gen), dim=-1) for _ in range(3))
    g, beta = -torch.rand(3, 1, 2, generator=gen), torch.rand(3, 1, 2, generator=gen)
    pool = torch.randn(6, 2, 16, 16, generator=gen)
    plain_pool = pool.clone()
    o_plain, _ = ops.fused_recurrent_gated_delta_rule(q, k, v, g, beta, initial_state=plain_pool,
                                                      ssm_state_indices=slots, backend=backend)
    o_spec, _ = ops.fused_recurrent_gated_delta_rule(q, k, v, g, beta, initial_state=pool,
                                                     ssm_state_indices=slots[:, None],
                                                     num_accepted_tokens=torch.ones(3, **i32), backend=backend)
    torch.testing.assert_close(o_spec, o_plain, **tol(KERNEL_VS_REFERENCE, F32))
    torch.testing.assert_close(pool, plain_pool, **tol(KERNEL_VS_REFERENCE, F32))

    x, weight = torch.randn(3, 24, generator=gen), torch.randn(24, 4, generator=gen)
    states = torch.randn(6, 3, 24, generator=gen)
    plain_states = states.clone()
    y_plain = ops.causal_conv1d_update(x, plain_states, weight, cache_indices=slots, backend=backend)
    y_spec = ops.causal_conv1d_update(x, states, weight, cache_indices=slots[:, None],
                                      query_start_loc=torch.arange(4, **i32),
                                      num_accepted_tokens=torch.ones(3, **i32), backend=backend)
    torch.testing.assert_close(y_spec, y_plain, **tol(KERNEL_VS_REFERENCE, F32))
    torch.testing.assert_close(states, plain_states, **tol(KERNEL_VS_REFERENCE, F32))


@pytest.mark.parametrize("backend", BACKENDS)
def test_spec_form_without_initial_state_starts_from_zeros(gen, backend):
    i32 = dict(dtype=torch.int32)
    table = torch.tensor([[1, 3, 5], [0, 2, 4]], **i32)
    cu = torch.tensor([0, 3, 5], **i32)
    q, k, v = (F.normalize(torch.randn(1, 5, 2, 16, generator=gen), dim=-1) for _ in range(3))
    g, beta = -torch.rand(1, 5, 2, generator=gen), torch.rand(1, 5, 2, generator=gen)
    pool = torch.randn(6, 2, 16, 16, generator=gen)
    o, final = ops.fused_recurrent_gated_delta_rule(
        q, k, v, g, beta, initial_state=pool, output_final_state=True, cu_seqlens=cu, ssm_state_indices=table,
        num_accepted_tokens=torch.tensor([3, 2], **i32), has_initial_state=torch.tensor([False, True]),
        backend=backend)
    want0, state0 = delta_rule_float64(q[0, :3], k[0, :3], v[0, :3], g[0, :3], beta[0, :3], 16 ** -0.5, None,
                                       l2norm=False)
    torch.testing.assert_close(o[0, :3].double(), want0, **tol(KERNEL_VS_REFERENCE, F32))
    torch.testing.assert_close(final[0].double(), state0, **tol(KERNEL_VS_REFERENCE, F32))
    torch.testing.assert_close(pool[5].double(), state0, **tol(KERNEL_VS_REFERENCE, F32))
