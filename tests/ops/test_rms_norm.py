"""``qwen_ops::rms_norm`` (bindings/cpu/rms_norm_cpu.cpp) against its reference, and the reference against float64.

The kernel must give ``reference.rms_norm`` (the model's torch form) up to the order of the sum of squares,
at widths that leave a tail past its 16 lanes, in float32 and bfloat16, over many rows (threads); reject bad
input naming the argument; stay traceable (its fake); and ``rms_norm_scaled`` must route CPU tensors to it.
"""
from __future__ import annotations

import pytest
import torch
from qwen_op_spy import qwen_op_calls
from tolerances import RMS_NORM, tol

from qwen_ops.model.network import layers
from qwen_ops.ops.norm import rms_norm, rms_norm_available
from qwen_ops.ops.norm import reference

try:
    from qwen_ops import _C  # noqa: F401
except ImportError:  # pragma: no cover - a pure-Python install has no CPU kernels
    pytest.skip("qwen_ops._C is not built (QWEN_OPS_BUILD_EXT=0)", allow_module_level=True)

EPS = 1e-6


def test_the_built_extension_has_the_kernel():
    assert rms_norm_available(), "qwen_ops._C is built but torch.ops.qwen_ops has no rms_norm"


def _operands(shape, dtype, seed):
    gen = torch.Generator().manual_seed(seed)
    x = (torch.randn(*shape, generator=gen) * 3.0).to(dtype)
    scale = 1.0 + 0.1 * torch.randn(shape[-1], generator=gen)
    return x, scale


def test_reference_matches_float64():
    x, scale = _operands((7, 129), torch.float32, 0)
    x64 = x.double()
    want = x64 / torch.sqrt((x64 ** 2).mean(-1, keepdim=True) + EPS) * scale.double()
    torch.testing.assert_close(reference.rms_norm(x, scale, EPS).double(), want, atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("shape", [(1, 1), (1, 15), (1, 16), (3, 17), (1, 1024), (2, 5, 128), (300, 1024)])
def test_matches_the_reference(dtype, shape):
    x, scale = _operands(shape, dtype, sum(shape))
    before = x.clone()
    out = rms_norm(x, scale, EPS)
    assert out.dtype == dtype and out.shape == x.shape
    torch.testing.assert_close(out, reference.rms_norm(x, scale, EPS), **tol(RMS_NORM, dtype))
    assert torch.equal(x, before)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rows_at_a_stride_and_the_models_per_head_view(dtype):
    """2-D rows at a row stride (the kernel reads them in place), and what rms_norm_scaled makes of the model's
    query heads: [T, H, 2 D] split into query and gate, the query a view that flattens to such rows."""
    x, scale = _operands((3, 4, 2 * 24), dtype, 7)
    query = x[..., :24]
    assert not query.is_contiguous()
    rows = query.view(-1, 24)
    out = rms_norm(rows, scale[:24], EPS)
    assert out.is_contiguous()
    torch.testing.assert_close(out, reference.rms_norm(rows, scale[:24], EPS), **tol(RMS_NORM, dtype))
    per_head = layers.rms_norm_scaled(query, scale[:24], EPS)
    assert per_head.shape == query.shape
    assert torch.equal(per_head, out.view(query.shape))


def test_a_zero_row_gives_zeros_and_eps_is_used():
    x = torch.zeros(2, 40)
    x[1] = 1e-4
    scale = torch.ones(40)
    out = rms_norm(x, scale, 1e-2)
    assert torch.equal(out[0], torch.zeros(40))
    torch.testing.assert_close(out[1], reference.rms_norm(x, scale, 1e-2)[1], rtol=1e-6, atol=0)


BAD = {
    "x dtype": (lambda x, s: (x.double(), s, EPS), "argument 'x' must be float32 or bfloat16"),
    "x strided": (lambda x, s: (x.t(), s[:4], EPS), "argument 'x' must be contiguous"),
    "scale shape": (lambda x, s: (x, s[:-1], EPS), "argument 'scale' must be a contiguous float32 CPU tensor \\[H\\]"),
    "scale dtype": (lambda x, s: (x, s.bfloat16(), EPS), "argument 'scale' must be a contiguous float32"),
    "eps": (lambda x, s: (x, s, float("nan")), "argument 'eps' must be finite and >= 0"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_input_raises_naming_the_argument(case):
    x, scale = _operands((4, 8), torch.float32, 1)
    build, message = BAD[case]
    with pytest.raises(RuntimeError, match="rms_norm: " + message):
        rms_norm(*build(x, scale))
    args = build(x, scale)
    with pytest.raises((ValueError, TypeError), match="rms_norm: argument"):  # the fake's checks, same names
        with torch._subclasses.fake_tensor.FakeTensorMode() as mode:
            torch.ops.qwen_ops.rms_norm(*(mode.from_tensor(a) if torch.is_tensor(a) else a for a in args))


def test_traceable_by_torch_compile():
    x, scale = _operands((3, 64), torch.float32, 2)
    compiled = torch.compile(lambda a, s: layers.rms_norm_scaled(a, s, EPS) * 2.0, backend="eager", fullgraph=True)
    torch.testing.assert_close(compiled(x, scale), rms_norm(x, scale, EPS) * 2.0, atol=0, rtol=0)


def test_rms_norm_scaled_routes_cpu_tensors_to_the_kernel(monkeypatch):
    x, scale = _operands((2, 64), torch.float32, 3)
    previous = layers.set_rms_norm_kernel(True)
    try:
        with qwen_op_calls(monkeypatch, "rms_norm", lambda args: args) as calls:
            out = layers.rms_norm_scaled(x, scale, EPS)
        layers.set_rms_norm_kernel(False)
        torch_form = layers.rms_norm_scaled(x, scale, EPS)  # the torch ops, as on other devices
    finally:
        layers.set_rms_norm_kernel(previous)
    assert len(calls) == 1 and calls[0][0] is x
    torch.testing.assert_close(out, torch_form, **tol(RMS_NORM, torch.float32))
