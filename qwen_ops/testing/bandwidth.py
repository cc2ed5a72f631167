"""The machine's memory read rate, the denominator of every "floor" the benchmarks print.

``torch.sum`` over a float32 tensor far larger than the caches reads each byte
once, so bytes over its time is the read bandwidth the CPU path can reach. The
benchmarks that print a floor (``bench/ops_floor.py``, ``bench/e2e/``) measure it
here, in the same run as what they time.
"""
from __future__ import annotations

import statistics
import time
from typing import Callable, Sequence

import torch

F32_BYTES = 4


def read_bandwidth(nbytes: int = 512 << 20, repeats: int = 5,
                   statistic: Callable[[Sequence[float]], float] = statistics.median) -> float:
    """Bytes per second ``torch.sum`` reads from a float32 tensor of ``nbytes``.

    One untimed pass first (page faults), then ``repeats`` timed passes reduced by
    ``statistic`` (the median by default; ``min`` gives the best pass).
    """
    big = torch.ones(nbytes // F32_BYTES, dtype=torch.float32)
    big.sum()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        big.sum()
        times.append(time.perf_counter() - start)
    return big.numel() * F32_BYTES / statistic(times)
