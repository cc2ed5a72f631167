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


class LazyCpuOp:
    """A torch operator of ``qwen_ops._C`` looked up on first use, so that importing the ops never loads the
    extension; the lookup registers ``fake`` (the operator's shape function, for ``torch.compile``)."""

    def __init__(self, name: str, fake):
        self.name, self._fake, self._found = name, fake, None

    def available(self) -> bool:
        """Whether ``torch.ops.qwen_ops.<name>`` exists; the first call loads the extension."""
        if self._found is None:
            self._found = cpu_torch_op_available(self.name)
            if self._found:
                torch.library.register_fake(f"qwen_ops::{self.name}")(self._fake)
        return self._found

    @property
    def found(self) -> bool:
        """What an earlier ``available()`` found, without looking (False if it was never asked: inside a trace,
        which cannot load the extension)."""
        return bool(self._found)
