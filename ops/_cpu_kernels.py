"""Look up an optional CPU kernel of ``qwen_ops._C`` (``bindings/cpu/``) by name, once: a pybind11 function
or a torch operator it registers."""
from __future__ import annotations

import functools

import torch


@functools.lru_cache(maxsize=None)
def cpu_kernel(name: str):
    """``qwen_ops._C.<name>``, or None without the extension (``QWEN_OPS_BUILD_EXT=0``) or without that kernel."""
    try:
        from qwen_ops import _C
    except ImportError:
        return None
    return getattr(_C, name, None)


@functools.lru_cache(maxsize=None)
def cpu_torch_op_available(name: str) -> bool:
    """Whether ``qwen_ops._C`` is built and registered ``torch.ops.qwen_ops.<name>`` (False on a pure-Python
    install, ``QWEN_OPS_BUILD_EXT=0``)."""
    try:
        from qwen_ops import _C  # noqa: F401  (importing it registers its torch operators)
    except ImportError:
        return False
    return hasattr(torch.ops.qwen_ops, name)
