"""Look up an optional CPU kernel of ``qwen_ops._C`` (``bindings/cpu/``) by name, once."""
from __future__ import annotations

import functools


@functools.lru_cache(maxsize=None)
def cpu_kernel(name: str):
    """``qwen_ops._C.<name>``, or None without the extension (``QWEN_OPS_BUILD_EXT=0``) or without that kernel."""
    try:
        from qwen_ops import _C
    except ImportError:
        return None
    return getattr(_C, name, None)
