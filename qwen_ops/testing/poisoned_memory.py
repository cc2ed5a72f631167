"""Fresh host allocations filled with a sentinel, so an output a kernel never wrote cannot pass as zeros.

Kernels allocate their outputs uninitialised (``at::empty``). Large blocks
come straight from the OS, which hands out zeroed pages: a kernel that
skips writing zeros (a padding row's output or final state) still "returns"
zeros, and a test passes by luck. Inside :func:`poisoned_allocations`
glibc's allocator fills every new block with a byte pattern first
(``mallopt(M_PERTURB)``, the runtime form of ``MALLOC_PERTURB_``); the default
fills float32 words with 0x7F7F7F7F (3.4e38) and bfloat16 ones with 3.4e38
too (float16: NaN), far outside any tolerance.

Host (CPU) memory only: it is what the Ascend C stand-in and the torch CPU
allocator use. Device allocators are not affected.
"""
from __future__ import annotations

import contextlib
import ctypes
import ctypes.util

_M_PERTURB = -6  # glibc's mallopt parameter number


def _libc():
    name = ctypes.util.find_library("c")
    libc = ctypes.CDLL(name) if name else None
    if libc is None or not hasattr(libc, "mallopt"):
        return None
    return libc


def poisoning_available() -> bool:
    """Whether this process's C library can poison allocations (glibc)."""
    return _libc() is not None


@contextlib.contextmanager
def poisoned_allocations(fill_byte: int = 0x7F):
    """Within the block, new host allocations start as ``fill_byte`` repeated (glibc only).

    Raises RuntimeError where the C library has no ``mallopt`` (not glibc).
    """
    if not 0 < fill_byte < 256:
        raise ValueError(f"poisoned_allocations: fill_byte must be in [1, 255], got {fill_byte}")
    libc = _libc()
    if libc is None:
        raise RuntimeError("poisoned_allocations: needs glibc's mallopt(M_PERTURB)")
    # glibc fills a new block with the complement of the perturb byte.
    if libc.mallopt(_M_PERTURB, fill_byte ^ 0xFF) != 1:
        raise RuntimeError("poisoned_allocations: mallopt(M_PERTURB) was refused")
    try:
        yield
    finally:
        libc.mallopt(_M_PERTURB, 0)
