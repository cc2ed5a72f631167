"""small_m_linear over the same weights in 4 KB pages and in 2 MB transparent huge pages, paired in one process.

    python bench/e2e/bench_huge_pages.py [--rounds 15] [--threads 2]

The weights: one lm_head [248320, 1024] and 48 MLP gate/up weights [3584, 1024] of the 0.8B model (1.72 GB in
float32), once as torch allocated them and once moved by ``model/loading/huge_pages.py`` (the move is timed).
Each round times one M = 1 pass over every weight in both placements, alternating; medians of the rounds.
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch

from qwen_ops.model.loading.huge_pages import huge_pages_available, move_weights_to_huge_pages
from qwen_ops.ops.linear import small_m_linear


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    if not huge_pages_available():
        print("no transparent huge pages here: nothing to compare")
        return 1
    for dtype in (torch.float32, torch.bfloat16):
        plain = [torch.randn(248320, 1024).to(dtype)] + [torch.randn(3584, 1024).to(dtype) for _ in range(48)]
        copies = {f"w{i}": w.clone() for i, w in enumerate(plain)}
        start = time.perf_counter()
        huge, moved = move_weights_to_huge_pages(copies)
        move_s = time.perf_counter() - start
        huge = list(huge.values())
        x = torch.randn(1, 1024).to(dtype)

        def one_pass(weights):
            start = time.perf_counter()
            for w in weights:
                small_m_linear(x, w)
            return time.perf_counter() - start

        four_k, two_m = [], []
        for _ in range(args.rounds):
            four_k.append(one_pass(plain))
            two_m.append(one_pass(huge))
        nbytes = sum(w.nbytes for w in plain)
        print(f"{dtype}: {nbytes / 1e9:.2f} GB; 4 KB pages {nbytes / statistics.median(four_k) / 1e9:.1f} GB/s, "
              f"2 MB pages {nbytes / statistics.median(two_m) / 1e9:.1f} GB/s; moved {moved / 1e9:.2f} GB in "
              f"{move_s:.2f} s (the old copies kept alive here)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
