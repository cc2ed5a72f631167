"""Property tests of the op contracts: every backend against the reference on random valid calls.

For each op, hypothesis draws calls within the documented ranges (``op_strategies``: block sizes
1 to 16, head dims, GQA ratios 1 to 4, empty and one-token sequences, pools with holes and
non-contiguous block tables, INT8 caches, padding rows) and checks, on every backend here (the
torch backend's CPU fast forms, Triton under its interpreter, the Ascend C kernels on the CPU
stand-in):

* outputs equal the reference's within ``KERNEL_VS_REFERENCE`` (cache writes: exactly);
* what the op updates in place (caches, state pools) equals the reference's update, and every other
  input is left as it was.

Examples are derandomized (a fixed sequence per test, so CI is reproducible) and few for the
Triton interpreter, which runs each program instance in Python.
"""
from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from op_strategies import STRATEGIES, backends_of, reference_backend

from qwen_ops import ops

from tolerances import KERNEL_VS_REFERENCE, tol

# Examples per backend; the Triton interpreter gets fewer and smaller ones.
EXAMPLES = {"torch": 15, "ascendc": 8, "triton": 3}


def _settings(backend):
    return settings(max_examples=EXAMPLES[backend], deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def _outputs(result):
    if result is None:
        return []
    return list(result) if isinstance(result, tuple) else [result]


def _assert_close(got, want, dtype, what):
    if want is None or got is None:
        assert got is None and want is None, what
        return
    assert got.shape == want.shape and got.dtype == want.dtype, f"{what}: {got.shape}/{got.dtype} vs {want.shape}/{want.dtype}"
    if got.dtype in (torch.int8, torch.int32, torch.int64, torch.bool):
        assert torch.equal(got, want), what
    else:
        torch.testing.assert_close(got.float(), want.float(), **tol(KERNEL_VS_REFERENCE, dtype), msg=what)


def check_against_reference(case, backend):
    fn = getattr(ops, case.op)
    with reference_backend(case.op):
        want_call = case.fresh()
        want = _outputs(fn(**want_call, backend="torch"))
    got_call = case.fresh()
    got = _outputs(fn(**got_call, backend=backend))
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want)):
        _assert_close(g, w, case.dtype, f"{case.op} on {backend}: output {i}")
    for name, before in case.call.items():
        if not isinstance(before, torch.Tensor):
            continue
        if name in case.written:
            # float caches are copies (exact); state pools hold float32 results of the recurrence
            exact = name in ("key_cache", "value_cache")
            if exact:
                assert torch.equal(got_call[name], want_call[name]), f"{case.op} on {backend}: {name}"
            else:
                _assert_close(got_call[name], want_call[name], torch.float32, f"{case.op} on {backend}: {name}")
        else:
            assert torch.equal(got_call[name].nan_to_num(), before.nan_to_num()), \
                f"{case.op} on {backend} wrote its input '{name}'"


PAIRS = [pytest.param(name, backend, id=f"{name}-{backend}") for name in STRATEGIES for backend in backends_of(name)]


@pytest.mark.parametrize("name,backend", PAIRS)
def test_backend_matches_the_reference(name, backend):
    strategy = STRATEGIES[name][1](small=backend == "triton")

    @_settings(backend)
    @given(case=strategy)
    def run(case):
        check_against_reference(case, backend)

    run()
