"""What every Triton kernel of the project shares: targets, grids and configs.

One kernel source serves three targets, told apart by the device of the
tensors at launch time (never by starting a driver, which fails on a
CPU-only machine):

* ``"interpreter"``: CPU tensors under ``TRITON_INTERPRET=1`` (how CI tests);
* ``"cuda"``: NVIDIA GPUs through ``triton``;
* ``"npu"``: Ascend through ``triton-ascend`` (Triton 3.2 API level).

Grids are persistent and one-dimensional: ``grid_size`` programs (at most
65535) each loop over work items with
``tl.range(pid, n_items, tl.num_programs(0))``. Under the interpreter the grid
is 3 programs, so the loop runs more than once per program in the tests.

Configs: ``configured`` wraps a ``@triton.jit`` kernel. Under the interpreter
and on Ascend it launches with a fixed config chosen on the host (a function
of the shapes); on CUDA it autotunes over a list of configs (autotune does not
run under the interpreter).

Dot precision: ``dot_precision`` (and ``float32_dot_precision``, for float32
operands kept so on purpose in a 16-bit model) is the one place that chooses
the ``input_precision`` every ``tl.dot`` of the project passes (explicitly: a
``None`` reaches triton-ascend's front end, which has no default for it).

Recording: inside ``recorded_launches(target)`` the host code of the ops runs
on CPU tensors as if they were on that target and every ``ConfiguredKernel``
launch is recorded instead of run (``bench/toolchains/triton_launches.py``
enumerates what the ops launch this way, for the compiler checks).
"""
from __future__ import annotations

import contextlib
import functools
import os
from dataclasses import dataclass, field
from typing import Callable, Sequence

import torch
import triton
import triton.language as tl

from ._backend import triton_interpreting

MAX_GRID = 65535
INTERPRETER_PROGRAMS = 3
CUDA_PROGRAMS_PER_SM = 4
# Ascend 910B: 20 AI cores with 2 vector cores each. Used only when the device
# properties cannot be read.
ASCEND_FALLBACK_VECTOR_CORES = 40
# Unified buffer per Ascend core; tiles are sized to fit it twice (double buffering).
ASCEND_UB_BYTES = 192 * 1024


# tl.dot input_precision per target, for float32 operands and for 16-bit (and
# dequantised int8) operands. float32: IEEE everywhere, since the float32 paths
# are checked against the reference at float32 tolerances (CUDA's "tf32" and
# Ascend's "hf32" round the inputs to 10 mantissa bits). 16-bit operands are
# multiplied exactly on every target and the value only has to be one the
# compiler accepts: CUDA's own default ("tf32"), and "ieee" on triton-ascend,
# whose NPUOptions allow only "ieee" and "hf32" (and "hf32" only for float32).
#
# "float32 in narrow": float32 operands kept float32 on purpose inside a kernel of a 16-bit model (a product
# whose error every later step inherits: the GDN chunk's triangular inverse). CUDA: "tf32x3" (three TF32
# tensor-core products of the operands' high and low parts, about float32's accuracy, where "ieee" would
# leave the kernel without tensor cores); Ascend: "ieee" ("hf32" would round them to 10 mantissa bits).
_DOT_PRECISION = {
    "cuda": {"float32": "ieee", "narrow": "tf32", "float32 in narrow": "tf32x3"},
    "npu": {"float32": "ieee", "narrow": "ieee", "float32 in narrow": "ieee"},
    "interpreter": {"float32": "ieee", "narrow": "ieee", "float32 in narrow": "ieee"},
}


def dot_precision(kind: str, dtype: torch.dtype) -> str:
    """``input_precision`` for ``tl.dot`` operands of ``dtype`` on target ``kind`` (see ``target``).

    Every Triton kernel of the project passes this (as a constexpr chosen on
    the host), never ``None``.
    """
    _check_precision_args("dot_precision", kind, dtype, "dtype")
    return _DOT_PRECISION[kind]["float32" if dtype == torch.float32 else "narrow"]


def float32_dot_precision(kind: str, model_dtype: torch.dtype) -> str:
    """``input_precision`` for a ``tl.dot`` of float32 operands that a kernel keeps float32 for accuracy,
    in a kernel computing a ``model_dtype`` model on target ``kind``.

    A float32 model gets ``dot_precision``'s float32 choice (IEEE everywhere); a 16-bit model gets the
    "float32 in narrow" column of the table above (CUDA: 3xTF32 on tensor cores).
    """
    _check_precision_args("float32_dot_precision", kind, model_dtype, "model_dtype")
    return _DOT_PRECISION[kind]["float32" if model_dtype == torch.float32 else "float32 in narrow"]


def _check_precision_args(fn: str, kind: str, dtype: torch.dtype, dtype_arg: str) -> None:
    if kind not in _DOT_PRECISION:
        raise ValueError(f"{fn}: argument 'kind' must be one of {sorted(_DOT_PRECISION)}, got {kind!r}")
    if dtype not in (torch.float32, torch.float16, torch.bfloat16):
        raise ValueError(f"{fn}: argument '{dtype_arg}' must be float32, float16 or bfloat16, got {dtype}")


@dataclass
class RecordedLaunch:
    """One launch the host code made inside ``recorded_launches``.

    ``configs``: the meta-parameters the target launches with: the fixed
    config (interpreter, Ascend) or every autotune config (CUDA), each a dict
    that may hold ``num_warps``/``num_stages``.
    """

    kernel: "ConfiguredKernel"
    target: str
    grid: tuple
    args: tuple
    kwargs: dict
    configs: list


@dataclass
class _Recording:
    target: str
    programs: int
    launches: list = field(default_factory=list)


_recording: _Recording | None = None


@contextlib.contextmanager
def recorded_launches(as_target: str, programs: int):
    """Run the ops' host code on CPU tensors as on ``as_target`` ("cuda" or "npu"); yield the launches.

    ``target()`` answers ``as_target`` for CPU tensors, grids are sized for
    ``programs`` programs, and ``ConfiguredKernel.launch`` records a
    ``RecordedLaunch`` and returns without running anything (outputs stay
    uninitialised). ``TRITON_INTERPRET=1`` is set meanwhile only so that the
    backend selection accepts CPU tensors: the kernel modules must be imported
    before (a ``@triton.jit`` decorated under it would be an interpreted function).
    """
    global _recording
    if as_target not in ("cuda", "npu"):
        raise ValueError(f"recorded_launches: argument 'as_target' must be 'cuda' or 'npu', got {as_target!r}")
    if _recording is not None:
        raise RuntimeError("recorded_launches: already recording")
    saved = os.environ.get("TRITON_INTERPRET")
    os.environ["TRITON_INTERPRET"] = "1"
    _recording = _Recording(as_target, programs)
    try:
        yield _recording.launches
    finally:
        _recording = None
        if saved is None:
            os.environ.pop("TRITON_INTERPRET", None)
        else:
            os.environ["TRITON_INTERPRET"] = saved


def target(device: torch.device) -> str:
    """"interpreter", "cuda" or "npu" for tensors on ``device``."""
    if device.type == "cpu" and _recording is not None:
        return _recording.target
    if device.type == "cpu":
        if not triton_interpreting():
            raise RuntimeError("Triton kernels on CPU tensors need TRITON_INTERPRET=1")
        return "interpreter"
    if device.type in ("cuda", "npu"):
        return device.type
    raise RuntimeError(f"Triton kernels cannot run on device type {device.type!r}")


@functools.lru_cache(maxsize=None)
def _device_programs(kind: str, index: int) -> int:
    if kind == "cuda":
        sms = torch.cuda.get_device_properties(index).multi_processor_count
        return sms * CUDA_PROGRAMS_PER_SM
    if kind == "npu":
        try:  # triton-ascend reports its core counts through the active driver
            props = triton.runtime.driver.active.utils.get_device_properties(index)
            return int(props.get("num_vectorcore") or props.get("num_aicore"))
        except Exception:  # noqa: BLE001 - any failure falls back to the 910B count
            return ASCEND_FALLBACK_VECTOR_CORES
    return INTERPRETER_PROGRAMS


def grid_size(device: torch.device, n_items: int) -> int:
    """Programs of a persistent grid over ``n_items`` work items on ``device``."""
    kind = target(device)
    programs = _recording.programs if _recording is not None else _device_programs(kind, device.index or 0)
    return max(1, min(n_items, programs, MAX_GRID))


# What a CUDA config that does not name them launches with (``ConfiguredKernel``'s autotune list).
DEFAULT_NUM_WARPS = 4
DEFAULT_NUM_STAGES = 2


class ConfiguredKernel:
    """A jitted kernel plus how to choose its meta-parameters on each target."""

    def __init__(self, kernel, fixed: Callable[..., dict], cuda_configs: Sequence[dict] | None, key: Sequence[str],
                 restore_value: Sequence[str] = ()):
        self.kernel = kernel
        self.fixed = fixed
        self.cuda_configs = list(cuda_configs or [])
        for config in self.cuda_configs:
            _check_cuda_config(kernel, config)
        self.key = list(key)
        self.restore_value = list(restore_value)

    @functools.cached_property
    def _autotuned(self):
        configs = [
            triton.Config({k: v for k, v in c.items() if k not in ("num_warps", "num_stages")},
                          num_warps=c.get("num_warps", DEFAULT_NUM_WARPS),
                          num_stages=c.get("num_stages", DEFAULT_NUM_STAGES))
            for c in self.cuda_configs
        ]
        # Autotuning runs the kernel once per config: arguments it updates in
        # place (state pools) are restored after each trial run.
        return triton.autotune(configs=configs, key=self.key, restore_value=self.restore_value or None)(self.kernel)

    def launch(self, device: torch.device, n_items: int, *args, shape: dict | None = None, **kwargs):
        """Launch on a persistent 1-D grid. ``shape`` feeds the fixed-config chooser."""
        grid = (grid_size(device, n_items),)
        autotuned = target(device) == "cuda" and bool(self.cuda_configs)
        if _recording is not None:
            configs = [dict(c) for c in self.cuda_configs] if autotuned else [self.fixed(**(shape or {}))]
            _recording.launches.append(RecordedLaunch(self, _recording.target, grid, args, kwargs, configs))
            return None
        if autotuned:
            return self._autotuned[grid](*args, **kwargs)
        return self.kernel[grid](*args, **self.fixed(**(shape or {})), **kwargs)


def _is_power_of_two(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0 and value & (value - 1) == 0


def _check_cuda_config(kernel, config: dict) -> None:
    """Refuse, where the kernel is declared, a CUDA config that could only fail on a GPU (where CI never
    runs it): Triton needs a power-of-two warp count (at most 32) and power-of-two block sizes
    (``tl.arange`` extents), and at least one pipeline stage."""
    name = getattr(kernel, "__name__", repr(kernel))  # a JITFunction carries its function's name
    warps, stages = config.get("num_warps", DEFAULT_NUM_WARPS), config.get("num_stages", DEFAULT_NUM_STAGES)
    if not _is_power_of_two(warps) or warps > 32:
        raise ValueError(f"{name}: cuda config {config} has num_warps={warps!r}; Triton needs a power of two <= 32")
    if isinstance(stages, bool) or not isinstance(stages, int) or stages < 1:
        raise ValueError(f"{name}: cuda config {config} has num_stages={stages!r}; it must be an int >= 1")
    for key, value in config.items():
        if key.startswith("BLOCK") and not _is_power_of_two(value):
            raise ValueError(f"{name}: cuda config {config} has {key}={value!r}; block sizes are powers of two "
                             f"(tl.arange extents)")


def configured(*, fixed: Callable[..., dict], cuda_configs: Sequence[dict] | None = None, key: Sequence[str] = (),
               restore_value: Sequence[str] = ()):
    """Decorate a ``@triton.jit`` kernel with its config choice (see module doc).

    ``restore_value`` names the pointer arguments the kernel updates in place;
    autotuning on CUDA restores them after each trial launch.
    """

    def wrap(kernel):
        return ConfiguredKernel(kernel, fixed, cuda_configs, key, restore_value)

    return wrap



@triton.jit
def and_flag(mask, flag):
    """``mask & flag`` for a tile ``mask`` and a scalar boolean ``flag``.

    Written as a ``tl.where`` because the interpreter (Triton 3.9) turns
    ``tile & scalar_bool`` into an integer array, which ``tl.load`` then
    rejects as a mask.
    """
    return tl.where(flag, mask, False)
