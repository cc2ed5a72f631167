"""The package as an engine sees it: imports, registration, backends, compile."""
import importlib
import os
import subprocess
import sys

import pytest
import torch

import qwen_ops
import qwen_ops.ops as ops
from qwen_ops.ops import _backend

PUBLIC_OPS = list(_backend.IMPLEMENTATIONS)


def test_subpackages_are_inside_qwen_ops():
    for name in ("qwen_ops.ops", "qwen_ops.scheduling", "qwen_ops.model"):
        module = importlib.import_module(name)
        assert module.__name__ == name
    # The repository folders must not leak out as top-level packages.
    for bare in ("ops", "model", "scheduling"):
        spec = importlib.util.find_spec(bare)
        assert spec is None or "qwen_ops" not in (spec.origin or ""), bare


def test_extension_is_built():
    from qwen_ops import _C

    info = _C.build_info()
    assert info["ascendc_target"] in ("cpu-standin", "cann")
    # Without CANN the Ascend C kernels are still compiled (for the stand-in):
    # their tests must never be skipped for want of them.
    from qwen_ops.ops import ascendc_backend

    assert tuple(_C.ascendc_kernels) == ascendc_backend.KERNELS
    assert "ascendc" in ops.available_backends()
    assert info["torch_version"].split("+")[0] == torch.__version__.split("+")[0]


@pytest.mark.parametrize("name", PUBLIC_OPS)
def test_every_op_is_public_registered_and_documented(name):
    fn = getattr(ops, name)
    assert "backend" in fn.__code__.co_varnames
    assert fn.__doc__ and "Args" in fn.__doc__ and "[" in fn.__doc__, f"{name} must document shapes"
    assert hasattr(torch.ops.qwen_ops, name)
    assert "torch" in _backend.IMPLEMENTATIONS[name]


def test_available_backends():
    found = ops.available_backends()
    assert found[0] == "torch"
    assert ("triton" in found) == (importlib.util.find_spec("triton") is not None)


@pytest.mark.parametrize("device", ["cuda", "cpu"])
def test_backend_resolution_traces_inside_torch_compile(device):
    # The graph-mode forward resolves each op's backend inside the compiled graph. On a GPU (where Triton is
    # the first candidate) that reached importlib.util.find_spec, which dynamo refuses to trace: graph mode
    # failed to compile on an H200. Resolution must read only what a trace can.
    dev = torch.device(device)
    _backend.read_installation()  # what the graph runner does before it compiles
    eager = [_backend.resolved_backend(op, None, dev) for op in ("causal_conv1d_update", "fused_gdn_gating")]

    def resolve_inside(x):
        names = [_backend.resolved_backend(op, None, dev) for op in ("causal_conv1d_update", "fused_gdn_gating")]
        return x + len(ops.available_backends()), names

    out, traced = torch.compile(resolve_inside, fullgraph=True, backend="eager")(torch.zeros(1))
    assert traced == eager and out.item() == len(ops.available_backends())


def test_cpu_default_is_torch_and_env_overrides(monkeypatch):
    torch_impl = _backend.resolve("fused_gdn_gating", None, torch.device("cpu"))
    assert torch_impl.__module__.endswith("gdn.reference_gating")
    monkeypatch.setenv("QWEN_OPS_BACKEND", "no-such-backend")
    with pytest.raises(ops.BackendError, match="unknown backend 'no-such-backend'"):
        _backend.resolve("fused_gdn_gating", None, torch.device("cpu"))


def test_backend_that_cannot_serve_is_a_clear_error(monkeypatch):
    a = torch.randn(3, 4)
    b = torch.randn(3, 4)
    h = torch.randn(4)
    # An op without an ascendc kernel (made so here, whichever ops have one by now).
    monkeypatch.delitem(_backend.IMPLEMENTATIONS["prefill_attention"], "ascendc", raising=False)
    with pytest.raises(ops.BackendError, match="prefill_attention: backend 'ascendc' does not implement"):
        _backend.resolve("prefill_attention", "ascendc", torch.device("cpu"))
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    with pytest.raises(ops.BackendError, match="TRITON_INTERPRET=1"):
        ops.fused_gdn_gating(h, a, b, h, backend="triton")
    with pytest.raises(ops.BackendError, match="cannot serve meta tensors"):
        _backend.resolve("fused_gdn_gating", "triton", torch.device("meta"))


def _paged_setup(gen, T=6, hkv=2, hq=4, d=64, bs=16, nb=5):
    key = torch.randn(T, hkv, d, generator=gen)
    value = torch.randn(T, hkv, d, generator=gen)
    query = torch.randn(1, hq, d, generator=gen)
    key_cache = torch.zeros(nb, hkv, bs, d)
    value_cache = torch.zeros(nb, hkv, bs, d)
    block_tables = torch.tensor([[3]], dtype=torch.int32)
    slots = torch.arange(T) + 3 * bs
    seq_lens = torch.tensor([T], dtype=torch.int32)
    return query, key, value, key_cache, value_cache, slots, block_tables, seq_lens


def test_torch_compile_fullgraph_calls_two_ops(gen):
    """An engine step (write the cache, then attend) traced as one graph."""
    query, key, value, kc, vc, slots, bt, lens = _paged_setup(gen)

    def step(query, key, value, kc, vc, slots, bt, lens):
        ops.reshape_and_cache(key, value, kc, vc, slots)
        return ops.paged_decode_attention(query, kc, vc, bt, lens)

    eager = step(query, key, value, kc.clone(), vc.clone(), slots, bt, lens)
    compiled = torch.compile(step, fullgraph=True, backend="inductor")
    kc2, vc2 = kc.clone(), vc.clone()
    out = compiled(query, key, value, kc2, vc2, slots, bt, lens)
    torch.testing.assert_close(out, eager)
    # The in-place cache write survived compilation.
    torch.testing.assert_close(kc2[3, :, :6], key.transpose(0, 1))


def test_fake_implementations_propagate_shapes(gen):
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        q = torch.empty(2, 16, 4, 32)
        k = torch.empty(2, 16, 4, 32)
        v = torch.empty(2, 16, 8, 16)
        g = torch.empty(2, 16, 8)
        o, final, _ = torch.ops.qwen_ops.chunk_gated_delta_rule(q, k, v, g, g, None, None, True, None, None, None,
                                                            False, None)
        assert o.shape == v.shape and final.shape == (2, 8, 32, 16)
        with pytest.raises(ValueError, match="argument 'v'"):
            torch.ops.qwen_ops.chunk_gated_delta_rule(q, k, v[:, :8], g, g, None, None, True, None, None, None,
                                                      False, None)


def test_import_does_not_load_triton_or_extension():
    code = ("import sys, qwen_ops, qwen_ops.ops; "
            "print('triton' in sys.modules, 'qwen_ops._C' in sys.modules)")
    env = dict(os.environ)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.split() == ["False", "False"]
