"""The conv update at decode 1 (Qwen3.5-0.8B: C = 6144, K = 4) with and without its old per-call weight copy.

Paired in one process, alternating call by call: the op now, and the op plus the
``weight.t().contiguous()`` its wrapper made on every call before the C++ kernel read
the weight in its own [C, K] layout (branch perf-ops3). One torch thread, 20,000 calls
each, medians.

    python bench/conv_update_weight_copy.py
"""
from __future__ import annotations

import os
import statistics
import time

import torch

from qwen_ops.ops.conv import vectorized_update
from qwen_ops.testing import Draw, conv_update_call, pool_indices


def main(calls: int = 20000) -> None:
    torch.set_num_threads(1)
    draw = Draw(seed=7)
    arguments = conv_update_call(draw, 6144, 4, torch.float32, pool_rows=2, weight_scale=0.5,
                                 cache_indices=pool_indices(draw, 1, 2))
    arguments["activation"] = "silu"
    weight = arguments["weight"]
    now, with_copy = [], []
    for _ in range(calls):
        start = time.perf_counter()
        vectorized_update.causal_conv1d_update(**arguments)
        now.append(time.perf_counter() - start)
        start = time.perf_counter()
        weight.t().contiguous()
        vectorized_update.causal_conv1d_update(**arguments)
        with_copy.append(time.perf_counter() - start)
    print(f"load average {os.getloadavg()[0]:.1f}; median us per call: conv update now "
          f"{statistics.median(now) * 1e6:.1f}, with the old per-call weight copy {statistics.median(with_copy) * 1e6:.1f}")


if __name__ == "__main__":
    main()
