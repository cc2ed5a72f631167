"""What the kernel benchmark suites share: device, backends, shapes, timing.

* Device: CUDA if present, else an Ascend NPU (torch_npu) if present, else the CPU.
* Backends: every backend that implements the op is a parameter; those whose
  timing would mean nothing here are skipped with the reason (Triton on CPU
  runs in its numpy interpreter, Ascend C on CPU runs a stand-in simulator).
* Shapes: realistic Qwen3.5 shapes by default; ``QWEN_OPS_BENCH_QUICK=1``
  shrinks every case to a few tokens and heads so the suites themselves can
  be tested in seconds (``tests/test_bench_suites.py``).
* Inputs: drawn by the shared case registry (``qwen_ops.testing``), as the
  tests and the device check draw theirs.
* Memory: a case whose tensors would exceed ``QWEN_OPS_BENCH_MAX_GB`` (default
  a quarter of the device memory, 4 GiB on the CPU) is skipped, saying so.
"""
from __future__ import annotations

import os

import pytest
import torch

from qwen_ops import testing
from qwen_ops.ops._backend import IMPLEMENTATIONS, _can_serve
from qwen_ops.testing import Draw

QUICK = os.environ.get("QWEN_OPS_BENCH_QUICK", "0") == "1"


def _pick_device() -> torch.device:
    if torch.cuda.is_available():
        return torch.device("cuda")
    try:
        import torch_npu  # noqa: F401

        if torch.npu.is_available():
            return torch.device("npu")
    except ImportError:
        pass
    return torch.device("cpu")


DEVICE = _pick_device()
# bfloat16 is the serving dtype on devices; CPU matmuls in bf16 are slow paths, so CPU runs float32.
DTYPE = torch.float32 if DEVICE.type == "cpu" else torch.bfloat16


def _memory_budget() -> int:
    if "QWEN_OPS_BENCH_MAX_GB" in os.environ:
        return int(float(os.environ["QWEN_OPS_BENCH_MAX_GB"]) * 2**30)
    if DEVICE.type == "cuda":
        return torch.cuda.get_device_properties(0).total_memory // 4
    if DEVICE.type == "npu":
        return torch.npu.get_device_properties(0).total_memory // 4
    return 4 * 2**30


MEMORY_BUDGET = _memory_budget()


def backends(op: str) -> list:
    """pytest params for every backend implementing ``op``, skipped where timing it here means nothing."""
    params = []
    for backend in IMPLEMENTATIONS[op]:
        if backend == "triton" and DEVICE.type == "cpu":
            reason = "Triton on CPU tensors runs in its interpreter (numpy per tile op): its speed means nothing"
        else:
            reason = _can_serve(backend, DEVICE)
            if reason is None and backend == "ascendc" and DEVICE.type == "cpu":
                reason = "Ascend C on CPU tensors runs the CPU stand-in simulator: its speed means nothing"
        marks = [pytest.mark.skip(reason=f"{op}/{backend}: {reason}")] if reason else []
        params.append(pytest.param(backend, id=backend, marks=marks))
    return params


def pick(realistic, quick):
    """The realistic parameter list, or the quick one under QWEN_OPS_BENCH_QUICK=1."""
    return quick if QUICK else realistic


def require_memory(nbytes: int, what: str) -> None:
    """Skip (with the numbers) a case whose tensors would not fit the memory budget."""
    if nbytes > MEMORY_BUDGET:
        pytest.skip(f"{what} needs {nbytes / 2**30:.1f} GiB > budget {MEMORY_BUDGET / 2**30:.1f} GiB "
                    "(QWEN_OPS_BENCH_MAX_GB)")


def synchronize() -> None:
    if DEVICE.type == "cuda":
        torch.cuda.synchronize()
    elif DEVICE.type == "npu":
        torch.npu.synchronize()


def run(benchmark, fn, **extra_info):
    """Time ``fn`` (device-synchronised) after one untimed call (compilation, autotuning, caches)."""

    def timed():
        result = fn()
        synchronize()
        return result

    timed()
    benchmark.extra_info.update(device=DEVICE.type, dtype=str(DTYPE).replace("torch.", ""), quick=QUICK,
                                **extra_info)
    return benchmark(timed)


def generator() -> Draw:
    """A seeded random source on the benchmark device (large inputs are drawn where they live)."""
    return Draw(seed=0, device=DEVICE)


def randn(*shape, gen: Draw, dtype=None, scale=1.0):
    """Normal values of ``shape`` on the device, in ``dtype`` (default: the benchmark dtype)."""
    return gen.randn(*shape, dtype=dtype or DTYPE, scale=scale)


def offsets(lengths) -> torch.Tensor:
    """int32 [N+1] cumulative offsets of ``lengths``, on the device."""
    return testing.offsets(lengths, DEVICE)
