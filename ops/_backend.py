"""Backend selection: which implementation serves a call.

Every public op takes ``backend=None``. Three backends exist:

* ``torch``   -- the pure-torch reference. Always available, serves any device.
* ``triton``  -- one Triton source for Ascend (triton-ascend), NVIDIA (triton)
  and the CPU (Triton's interpreter, ``TRITON_INTERPRET=1``).
* ``ascendc`` -- hand-written Ascend C kernels behind ``qwen_ops._C``: on NPU
  tensors when built with CANN, on CPU tensors through the CPU stand-in.

With ``backend=None`` the device of the inputs decides (NPU: ascendc, then
triton; CUDA: triton; CPU: torch) and the environment variable
``QWEN_OPS_BACKEND`` overrides that choice. Implementations are looked up in
``IMPLEMENTATIONS`` and imported lazily, so importing ``qwen_ops`` never starts
a Triton driver or loads the extension.
"""
from __future__ import annotations

import functools
import importlib
import importlib.util
import inspect
import os
from typing import Callable

import torch

BACKENDS = ("torch", "triton", "ascendc")

# op name -> backend -> "module:function", relative to this package.
IMPLEMENTATIONS: dict[str, dict[str, str]] = {
    "reshape_and_cache": {
        "torch": "cache.vectorized_write:reshape_and_cache",  # tested against cache.reference
        "triton": "cache.triton:reshape_and_cache",
        "ascendc": "ascendc_backend:reshape_and_cache",
    },
    "paged_decode_attention": {
        "torch": "attention.vectorized_decode:paged_decode_attention",  # tested against attention.reference
        "triton": "attention.triton_decode:paged_decode_attention",
        "ascendc": "ascendc_backend:paged_decode_attention",
    },
    "prefill_attention": {
        "torch": "attention.vectorized_prefill:prefill_attention",  # tested against attention.reference
        "triton": "attention.triton_prefill:prefill_attention",
        "ascendc": "ascendc_backend:prefill_attention",
    },
    "mixed_attention": {
        "torch": "attention.vectorized_mixed:mixed_attention",  # tested against attention.reference
        "triton": "attention.triton_mixed:mixed_attention",
        "ascendc": "ascendc_backend:mixed_attention",
    },
    "chunk_gated_delta_rule": {
        "torch": "gdn.vectorized_chunk:chunk_gated_delta_rule",  # tested against gdn.reference_chunk
        "triton": "gdn.triton_chunk:chunk_gated_delta_rule",
        "ascendc": "ascendc_backend:chunk_gated_delta_rule",
    },
    "fused_recurrent_gated_delta_rule": {
        "torch": "gdn.vectorized_recurrent:fused_recurrent_gated_delta_rule",  # tested against reference_recurrent
        "triton": "gdn.triton_recurrent:fused_recurrent_gated_delta_rule",
        "ascendc": "ascendc_backend:fused_recurrent_gated_delta_rule",
    },
    "causal_conv1d_fn": {
        "torch": "conv.vectorized_fn:causal_conv1d_fn",  # tested against conv.reference
        "triton": "conv.triton:causal_conv1d_fn",
        "ascendc": "ascendc_backend:causal_conv1d_fn",
    },
    "causal_conv1d_update": {
        "torch": "conv.vectorized_update:causal_conv1d_update",  # tested against conv.reference
        "triton": "conv.triton:causal_conv1d_update",
        "ascendc": "ascendc_backend:causal_conv1d_update",
    },
    "fused_gdn_gating": {
        "torch": "gdn.reference_gating:fused_gdn_gating",
        "triton": "gdn.triton_gating:fused_gdn_gating",
        "ascendc": "ascendc_backend:fused_gdn_gating",
    },
    # INT8-weight projections (W8A8, weight-only); no Ascend C kernel yet.
    "int8_linear": {
        "torch": "int8_linear.cpu_kernel:int8_linear",  # tested against int8_linear.reference
        "triton": "int8_linear.triton:int8_linear",
    },
    # One launch per GDN layer at decode (ops/gdn/decode_step/op.py); on the CPU the torch backend's
    # one-token form is the C++ kernel torch.ops.qwen_ops.gdn_decode_step, called before any dispatch.
    "gdn_decode_step": {
        "torch": "gdn.decode_step.reference:gdn_decode_step",
        "triton": "gdn.decode_step.triton:gdn_decode_step",
        "ascendc": "ascendc_backend:gdn_decode_step",
    },
    "fused_experts": {
        "torch": "moe.reference:fused_experts",
        "triton": "moe.triton_grouped_gemm:fused_experts",
        "ascendc": "ascendc_backend:fused_experts",
    },
}


class BackendError(RuntimeError):
    """A requested backend does not exist here or cannot serve these inputs."""


def triton_interpreting() -> bool:
    """True when Triton runs kernels on the CPU through its interpreter."""
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


def _read_ascendc_target() -> str | None:
    """"cpu-standin" or "cann" when qwen_ops._C has the Ascend C kernels, else None."""
    try:
        from qwen_ops import _C
    except ImportError:
        return None
    return _C.build_info()["ascendc_target"] if hasattr(_C, "ascendc_kernels") else None


# What this installation has, read once. Backend resolution also runs inside the graph-mode forward
# (torch.compile), where neither importlib.util.find_spec nor the extension's pybind11 functions can be traced
# (dynamo refuses both, and ignores an lru_cache around them): on a GPU, graph mode stopped at find_spec. So a
# trace reads plain module values. Triton's presence is read at import (find_spec locates the package without
# importing it); the extension's Ascend C target at the first call, since importing qwen_ops must not load the
# extension: read_installation() reads it eagerly, and the graph runner calls it before compiling.
_TRITON_FOUND = importlib.util.find_spec("triton") is not None
_ascendc_read: list[str | None] = []  # [target] once read


def _triton_importable() -> bool:
    return _TRITON_FOUND


def _ascendc_target() -> str | None:
    if not _ascendc_read:
        _ascendc_read.append(_read_ascendc_target())
    return _ascendc_read[0]


def read_installation() -> None:
    """Read what the backends need to know of this installation now (outside any torch.compile trace)."""
    _ascendc_target()


def _is_npu(device: torch.device) -> bool:
    return device.type == "npu"


def available_backends() -> list[str]:
    """Backends that exist in this installation, in preference order of no device.

    ``torch`` always; ``triton`` when a Triton package is importable;
    ``ascendc`` when ``qwen_ops._C`` was built with Ascend C kernels.
    """
    found = ["torch"]
    if _triton_importable():
        found.append("triton")
    if _ascendc_target() is not None:
        found.append("ascendc")
    return found


def _can_serve(backend: str, device: torch.device) -> str | None:
    """None if ``backend`` can run on ``device``, else the reason it cannot."""
    if backend == "torch":
        return None
    if backend == "triton":
        if not _triton_importable():
            return "no Triton package is installed (pip install triton, or triton-ascend on Ascend)"
        if device.type == "cpu" and not triton_interpreting():
            return "Triton runs CPU tensors only under its interpreter: set TRITON_INTERPRET=1 before importing qwen_ops"
        if device.type not in ("cpu", "cuda", "npu"):
            return f"Triton cannot run tensors on device type {device.type!r}"
        return None
    if backend == "ascendc":
        target = _ascendc_target()
        if target is None:
            return "qwen_ops._C was built without Ascend C kernels"
        if device.type == "cpu" and target == "cpu-standin":
            return None
        if _is_npu(device) and target == "cann":
            return None
        return f"the Ascend C kernels in this build ({target}) cannot run tensors on {device.type!r}"
    return f"unknown backend {backend!r}; expected one of {BACKENDS}"


def _default_order(device: torch.device) -> tuple[str, ...]:
    if _is_npu(device):
        return ("ascendc", "triton", "torch")
    if device.type == "cuda":
        return ("triton", "torch")
    return ("torch",)


def resolve(op: str, backend: str | None, device: torch.device) -> Callable:
    """Return the implementation of ``op`` that serves tensors on ``device``.

    An explicit ``backend`` (argument, else ``QWEN_OPS_BACKEND``) must be able
    to serve the call, or ``BackendError`` says why. Without one, the first
    backend in the device's preference order that implements ``op`` wins.
    """
    return _load(IMPLEMENTATIONS[op][resolved_backend(op, backend, device)])


def resolved_backend(op: str, backend: str | None, device: torch.device) -> str:
    """The name of the backend ``resolve`` picks for ``op`` (raises ``BackendError`` as it does)."""
    table = IMPLEMENTATIONS[op]
    requested = backend or os.environ.get("QWEN_OPS_BACKEND") or None
    if requested is not None:
        if requested not in BACKENDS:
            raise BackendError(f"{op}: unknown backend {requested!r}; expected one of {BACKENDS}")
        if requested not in table:
            raise BackendError(
                f"{op}: backend {requested!r} does not implement this op; "
                f"it is implemented by {sorted(table)}"
            )
        reason = _can_serve(requested, device)
        if reason is not None:
            raise BackendError(f"{op}: backend {requested!r} cannot serve {device.type} tensors: {reason}")
        return requested
    for candidate in _default_order(device):
        if candidate in table and _can_serve(candidate, device) is None:
            return candidate
    raise BackendError(f"{op}: no backend can serve {device.type} tensors")  # pragma: no cover


# Small index and parameter tensors that kernels read as dense arrays. They are
# made contiguous before any backend sees them: a strided slice would
# otherwise be read with the wrong stride (wrong answers, or writes to the
# wrong pool row). Tensors an op writes are never copied: they must already be
# contiguous, which the checks enforce.
METADATA_ARGUMENTS = frozenset({
    "block_tables", "seq_lens", "context_lens", "cu_seqlens_q", "query_start_loc", "slot_mapping",
    "cu_seqlens", "ssm_state_indices", "has_initial_state", "cache_indices", "num_accepted_tokens",
    "k_scale", "v_scale", "A_log", "dt_bias", "weight", "bias",
})


def dispatch(op: str, backend: str | None, device: torch.device, derived: dict | None = None, **arguments):
    """Run ``op`` on the backend that serves ``device`` with validated ``arguments``.

    ``derived``: metadata an engine computed once per step from the others (a
    chunk table, attention work units), given only to implementations that
    take it (the others need none); None entries are dropped.
    """
    impl = resolve(op, backend, device)
    for name in METADATA_ARGUMENTS.intersection(arguments):
        if arguments[name] is not None:
            arguments[name] = arguments[name].contiguous()
    for name, value in (derived or {}).items():
        if value is not None and name in _parameters(impl):
            arguments[name] = value.contiguous()
    return impl(**arguments)


@functools.lru_cache(maxsize=None)
def _parameters(impl: Callable) -> frozenset[str]:
    return frozenset(inspect.signature(impl).parameters)


@functools.lru_cache(maxsize=None)
def _load(target: str) -> Callable:
    module_name, function_name = target.split(":")
    module = importlib.import_module(f"{__package__}.{module_name}")
    return getattr(module, function_name)
