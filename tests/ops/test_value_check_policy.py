"""When ops read metadata values, and the per-step metadata an engine may pass in (chunk table, work units).

Value checks run on CPU tensors, on a device only with QWEN_OPS_CHECK_VALUES=1,
never inside ``trusted_metadata()``; derived metadata given to an op must give
the same result as the op's own, and a wrong one is rejected while values are checked.
"""
import pytest
import torch
from torch.profiler import ProfilerActivity, profile

import qwen_ops.ops as ops

SYNC_EVENTS = ("aten::item", "aten::_local_scalar_dense")


def host_reads(fn) -> int:
    """How many scalar reads of tensor data (host syncs on a device) ``fn()`` makes."""
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        fn()
    return sum(e.count for e in prof.key_averages() if e.key in SYNC_EVENTS)


def test_policy_cpu_device_switch_and_trusted(monkeypatch):
    monkeypatch.delenv(ops.CHECK_VALUES_ENV, raising=False)
    cpu, gpu = torch.device("cpu"), torch.device("cuda")  # only the device type is read
    assert ops.values_checked(cpu) and not ops.values_checked(gpu)
    monkeypatch.setenv(ops.CHECK_VALUES_ENV, "1")
    assert ops.values_checked(gpu)
    with ops.trusted_metadata():
        with ops.trusted_metadata():
            assert not ops.values_checked(cpu) and not ops.values_checked(gpu)
        assert not ops.values_checked(cpu)
    assert ops.values_checked(cpu) and ops.values_checked(gpu)


def _cache_case():
    key_cache = torch.zeros(4, 2, 4, 8)
    k, v = torch.randn(3, 2, 8), torch.randn(3, 2, 8)
    return k, v, key_cache, torch.zeros_like(key_cache)


def test_trusted_call_skips_value_checks_and_reads_nothing():
    k, v, kc, vc = _cache_case()
    repeated = torch.tensor([1, 1, 2])
    with pytest.raises(ValueError, match="repeats an index"):
        ops.reshape_and_cache(k, v, kc, vc, repeated, backend="torch")
    assert not kc.any()
    slots = torch.tensor([1, 5, 2])
    assert host_reads(lambda: ops.reshape_and_cache(k, v, kc, vc, slots, backend="torch")) > 0
    with ops.trusted_metadata():
        assert host_reads(lambda: ops.reshape_and_cache(k, v, kc, vc, slots, backend="torch")) == 0
        ops.reshape_and_cache(k, v, kc, vc, repeated, backend="torch")  # not checked: the caller vouched
    with pytest.raises(TypeError, match="slot_mapping"):  # dtypes are checked even when trusted
        with ops.trusted_metadata():
            ops.reshape_and_cache(k, v, kc, vc, slots.float(), backend="torch")


def _gdn_case(lens, gen):
    t, hk, hv, dk, dv = sum(lens), 1, 2, 16, 16
    q = torch.randn(1, t, hk, dk, generator=gen)
    k = torch.randn(1, t, hk, dk, generator=gen)
    v = torch.randn(1, t, hv, dv, generator=gen)
    g = -torch.rand(1, t, hv, generator=gen)
    beta = torch.rand(1, t, hv, generator=gen)
    cu = torch.tensor([0] + torch.tensor(lens).cumsum(0).tolist(), dtype=torch.int32)
    return (q, k, v, g, beta), cu


@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_given_chunk_table_gives_the_same_result(backend, gen):
    args, cu = _gdn_case([70, 5, 0, 64], gen)
    indices, offsets = ops.prepare_chunk_indices(cu)
    assert indices.tolist() == [[0, 64], [64, 70], [70, 75], [75, 139]] and offsets.tolist() == [0, 2, 3, 3, 4]
    own, _ = ops.chunk_gated_delta_rule(*args, cu_seqlens=cu, use_qk_l2norm_in_kernel=True, backend=backend)
    given, _ = ops.chunk_gated_delta_rule(*args, cu_seqlens=cu, use_qk_l2norm_in_kernel=True, backend=backend,
                                          chunk_indices=indices, chunk_offsets=offsets)
    torch.testing.assert_close(given, own, atol=0, rtol=0)
    if backend == "triton":
        with ops.trusted_metadata():
            reads = host_reads(lambda: ops.chunk_gated_delta_rule(
                *args, cu_seqlens=cu, backend=backend, chunk_indices=indices, chunk_offsets=offsets))
        assert reads == 0


def test_wrong_chunk_table_is_rejected(gen):
    args, cu = _gdn_case([70, 5], gen)
    indices, offsets = ops.prepare_chunk_indices(cu)
    run = ops.chunk_gated_delta_rule
    with pytest.raises(ValueError, match="not prepare_chunk_indices"):
        run(*args, cu_seqlens=cu, chunk_indices=indices.flip(0), chunk_offsets=offsets, backend="triton")
    with pytest.raises(TypeError, match="chunk_indices"):
        run(*args, cu_seqlens=cu, chunk_indices=indices.long(), chunk_offsets=offsets)
    with pytest.raises(ValueError, match="chunk_offsets"):
        run(*args, cu_seqlens=cu, chunk_indices=indices, chunk_offsets=offsets[:-1])
    with pytest.raises(ValueError, match="go together"):
        run(*args, cu_seqlens=cu, chunk_indices=indices)
    with pytest.raises(ValueError, match="chunk_gated_delta_rule only"):
        torch.ops.qwen_ops.fused_recurrent_gated_delta_rule(*args, None, None, False, cu, None, None, False, None,
                                                            indices, offsets)


def _mixed_case(gen, q_lens=(1, 1, 9, 20), context=(5, 17, 0, 3)):
    hq, hkv, d, bs, nb = 4, 2, 16, 4, 40
    t = sum(q_lens)
    kc = torch.randn(nb, hkv, bs, d, generator=gen)
    vc = torch.randn(nb, hkv, bs, d, generator=gen)
    # Decodes (the first two) have their new token in the cache already; prefills add theirs.
    seq_lens = torch.tensor([c + (0 if i < 2 else q) for i, (c, q) in enumerate(zip(context, q_lens))],
                            dtype=torch.int32)
    width = 8
    tables = torch.randperm(nb - 1, generator=gen)[: len(q_lens) * width].view(len(q_lens), width) + 1
    qsl = torch.tensor([0] + torch.tensor(q_lens).cumsum(0).tolist(), dtype=torch.int32)
    q, k, v = torch.randn(t, hq, d, generator=gen), torch.randn(t, hkv, d, generator=gen), \
        torch.randn(t, hkv, d, generator=gen)
    return dict(query=q, key=k, value=v, key_cache=kc, value_cache=vc, block_tables=tables.to(torch.int32),
                query_start_loc=qsl, seq_lens=seq_lens, num_decodes=2)


def test_given_prefill_units_give_the_same_result(gen):
    case = _mixed_case(gen)
    shape = dict(device="cpu", dtype=torch.float32, num_q_heads=4, num_kv_heads=2, head_dim=16)
    assert ops.prefill_units_for(case["query_start_loc"], 2, backend="torch", **shape) is None
    units = ops.prefill_units_for(case["query_start_loc"], 2, backend="triton", **shape)
    assert units.dtype == torch.int32 and units.shape[1] == 2 and set(units[:, 0].tolist()) == {2, 3}
    own = ops.mixed_attention(**case, backend="triton")
    given = ops.mixed_attention(**case, backend="triton", prefill_units=units)
    torch.testing.assert_close(given, own, atol=0, rtol=0)
    with ops.trusted_metadata():
        assert host_reads(lambda: ops.mixed_attention(**case, backend="triton", prefill_units=units)) == 0
    with pytest.raises(ValueError, match="prefill_units"):
        ops.mixed_attention(**case, backend="triton", prefill_units=units[1:])
    with pytest.raises(TypeError, match="prefill_units"):
        ops.mixed_attention(**case, backend="triton", prefill_units=units.long())
    # prefill_attention: the prefill rows alone, units from its own offsets.
    qsl = case["query_start_loc"][2:] - case["query_start_loc"][2]
    rows = slice(2, None)
    pre = dict(query=case["query"][rows], key=case["key"][rows], value=case["value"][rows], cu_seqlens_q=qsl)
    units = ops.prefill_units_for(qsl, 0, op="prefill_attention", backend="triton", **shape)
    torch.testing.assert_close(ops.prefill_attention(**pre, backend="triton", prefill_units=units),
                               ops.prefill_attention(**pre, backend="triton"), atol=0, rtol=0)


def test_derived_metadata_arguments_trace_with_fakes(gen):
    """The new optional arguments keep the ops traceable by torch.compile (their fakes check shapes only)."""
    case = _mixed_case(gen)
    units = ops.prefill_units_for(case["query_start_loc"], 2, backend="triton", device="cpu", dtype=torch.float32,
                                  num_q_heads=4, num_kv_heads=2, head_dim=16)
    args, cu = _gdn_case([70, 5], gen)
    indices, offsets = ops.prepare_chunk_indices(cu)

    def step(case, units, args, cu, indices, offsets):
        attn = ops.mixed_attention(**case, prefill_units=units)
        o, _ = ops.chunk_gated_delta_rule(*args, cu_seqlens=cu, chunk_indices=indices, chunk_offsets=offsets)
        return attn, o

    compiled = torch.compile(step, fullgraph=True, backend="aot_eager")
    got = compiled(case, units, args, cu, indices, offsets)
    want = step(case, units, args, cu, indices, offsets)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, atol=0, rtol=0)
