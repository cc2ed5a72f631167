"""The CUDA autotune configs of every Triton kernel are ones Triton can compile.

They run only on a GPU (under the interpreter and on Ascend each kernel takes its fixed config), so a bad
entry would first fail on a lent device: ``configured`` refuses it where the kernel is declared.
"""
import importlib
import pathlib

import pytest
import triton

from qwen_ops.ops._triton import ConfiguredKernel, configured

OPS = pathlib.Path(importlib.import_module("qwen_ops.ops").__file__).parent
KERNEL_MODULES = sorted(
    "qwen_ops.ops." + ".".join(p.relative_to(OPS).with_suffix("").parts)
    for p in OPS.rglob("*.py") if "@configured" in p.read_text())


def test_every_kernel_module_is_found():
    assert "qwen_ops.ops.gdn.triton_chunk" in KERNEL_MODULES and len(KERNEL_MODULES) >= 10


@pytest.mark.parametrize("module", KERNEL_MODULES)
def test_every_module_declares_its_kernels_with_configs_that_pass(module):
    """Importing the module runs ``configured``'s checks on each of its kernels' CUDA configs."""
    kernels = [v for v in vars(importlib.import_module(module)).values() if isinstance(v, ConfiguredKernel)]
    assert kernels, module


@triton.jit
def _kernel(x, BLOCK: "triton.language.constexpr"):
    pass


@pytest.mark.parametrize("config, match", [
    ({"BLOCK": 16, "num_warps": 7}, "num_warps=7"),
    ({"BLOCK": 16, "num_warps": 64}, "num_warps=64"),
    ({"BLOCK": 24, "num_warps": 4}, "BLOCK=24"),
    ({"BLOCK": 16, "num_stages": 0}, "num_stages=0"),
])
def test_a_config_triton_cannot_compile_is_refused_where_declared(config, match):
    with pytest.raises(ValueError, match=match):
        configured(fixed=lambda **_: {"BLOCK": 16}, cuda_configs=[config])(_kernel)
