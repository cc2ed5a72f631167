"""The CPU weights moved into one block of memory backed by 2 MB pages (Linux transparent huge pages).

Why: a CPU decode step streams every weight from memory once, so its time is the weights' bytes over the
read rate. Read through 4 KB pages, every 4 KB of a weight costs a TLB entry and the hardware prefetcher
stops at each page's end; through 2 MB pages it does not. Measured on this project's 2-core AVX-512 machine
(``bench/e2e/bench_huge_pages.py``: the decode kernel over the same weights, paired): float32 53.1 against 44.6
GB/s, bfloat16 33.9 against 31.4; bench/RESULTS.md ("On the CPU against llama.cpp").

How: torch allocates a large tensor with plain ``malloc``, which the kernel backs with 4 KB pages unless THP
is "always". Here the large tensors are copied, one at a time (so the extra memory is one tensor at most),
into one anonymous ``mmap`` advised ``MADV_HUGEPAGE`` before any page of it is touched, and replaced by views
of it; the values, dtypes and shapes stay the same. Tensors that share memory (the tied embedding and head)
stay shared. Where the system cannot give huge pages (not Linux, THP "never", ``QWEN_OPS_HUGE_PAGES=0``, or
the mapping or its advice refused) the weights are returned as they are.
"""
from __future__ import annotations

import dataclasses
import logging
import mmap
import os

import torch

logger = logging.getLogger("qwen_ops.engine")

HUGE_PAGES_ENV = "QWEN_OPS_HUGE_PAGES"
THP_SETTING = "/sys/kernel/mm/transparent_hugepage/enabled"
# Tensors below this stay where they are: a few pages each, nothing for the TLB or the prefetcher.
MIN_BYTES = 2 << 20
ALIGN = 4096  # every tensor starts on a page: rows keep their natural alignment


def huge_pages_available() -> bool:
    """Whether this process can get transparent huge pages for an advised mapping (and the switch is on)."""
    if os.environ.get(HUGE_PAGES_ENV, "1") == "0" or not hasattr(mmap, "MADV_HUGEPAGE"):
        return False
    try:
        with open(THP_SETTING) as f:
            setting = f.read()
    except OSError:
        return False
    return "[never]" not in setting


def _tensor_of(value):
    """The large CPU tensor a weights entry holds (a float weight, or an Int8Weight's int8 weight), or None."""
    t = getattr(value, "weight", value)
    if isinstance(t, torch.Tensor) and t.device.type == "cpu" and t.is_contiguous() and t.nbytes >= MIN_BYTES:
        return t
    return None


def _with_tensor(value, t: torch.Tensor):
    return t if isinstance(value, torch.Tensor) else dataclasses.replace(value, weight=t)


def move_weights_to_huge_pages(weights: dict) -> tuple[dict, int]:
    """``weights`` (name -> tensor or ``Int8Weight``) with its large CPU tensors in huge-page memory.

    Returns ``(weights, bytes moved)``; the input dict is changed in place too (each entry as it is moved, so
    the old tensor can be freed before the next one is copied). Where huge pages are unavailable, returns
    ``(weights, 0)`` untouched.
    """
    if not huge_pages_available():
        return weights, 0
    offsets: dict[tuple[int, int], int] = {}  # (data_ptr, nbytes) -> offset: shared tensors move once
    total = 0
    for value in weights.values():
        t = _tensor_of(value)
        if t is not None and (t.data_ptr(), t.nbytes) not in offsets:
            offsets[(t.data_ptr(), t.nbytes)] = total
            total += (t.nbytes + ALIGN - 1) // ALIGN * ALIGN
    if not total:
        return weights, 0
    try:
        arena = mmap.mmap(-1, total, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        arena.madvise(mmap.MADV_HUGEPAGE)  # before the first touch: the pages are then faulted in 2 MB at a time
    except OSError as exc:  # no room for the mapping, or the kernel refuses the advice: the weights stay
        logger.warning("weights stay in 4 KB pages: %s", exc)
        return weights, 0
    memory = torch.frombuffer(arena, dtype=torch.uint8)  # keeps the mapping alive as long as any view of it
    moved: dict[int, torch.Tensor] = {}
    for name, value in weights.items():
        t = _tensor_of(value)
        if t is None:
            continue
        offset = offsets[(t.data_ptr(), t.nbytes)]
        if offset not in moved:
            view = memory[offset: offset + t.nbytes].view(t.dtype).view(t.shape)
            view.copy_(t)
            moved[offset] = view
        weights[name] = _with_tensor(value, moved[offset])
    return weights, sum(v.nbytes for v in moved.values())
