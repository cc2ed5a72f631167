"""Shared by the tests of the torch backend's CPU forms that call a C++ kernel of ``qwen_ops._C`` first."""
from __future__ import annotations

import pytest


def cpu_kernel_or_skip(module):
    """module's C++ kernel; skip only where qwen_ops._C is not built at all (QWEN_OPS_BUILD_EXT=0).

    A built extension without the kernel is a failure, not a skip: the tests must not pass by
    quietly testing nothing.
    """
    try:
        from qwen_ops import _C  # noqa: F401
    except ImportError:
        pytest.skip("qwen_ops._C is not built (QWEN_OPS_BUILD_EXT=0)")
    kernel = module._kernel()
    assert kernel is not None, f"qwen_ops._C is built but {module.__name__} finds no kernel in it"
    return kernel


def kernel_or_torch_path(request, monkeypatch, module) -> str:
    """For a fixture parametrised over ["kernel", "torch"]: require module's kernel, or hide it (the torch form)."""
    if request.param == "kernel":
        cpu_kernel_or_skip(module)
    else:
        monkeypatch.setattr(module, "_kernel", lambda: None)
    return request.param


# Every instruction-set variant the C++ kernels are built with (``_C.cpu_isas()`` lists the ones this CPU runs).
ALL_ISAS = ("portable", "avx2", "avx512")


def isa_or_skip(isa: str) -> str:
    """``isa`` if this CPU runs that variant of the kernels; else skip, naming what the CPU has. Tests take
    every variant as a parameter, so a CPU without one shows the skip instead of a shorter list of cases."""
    try:
        from qwen_ops import _C
    except ImportError:
        pytest.skip("qwen_ops._C is not built (QWEN_OPS_BUILD_EXT=0)")
    available = list(_C.cpu_isas())
    if isa not in available:
        pytest.skip(f"this CPU does not run the {isa} variant (it runs {available})")
    return isa
