"""torch's linear at small batch (M rows) on the lm_head shape: F.linear against other spellings.

    python bench/e2e/bench_small_m_linear.py

The weight is Qwen3.5's tied lm_head, [248320, 1024] float32 (1 GB). Prints the median time
of each variant, the weight bytes over that time, and how far its result is from F.linear's
(bitwise equality matters: the engine's parity tests compare with transformers).
"""
import os
import statistics
import time

import torch

F = torch.nn.functional


def median_time(fn, repeats=5):
    fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main():
    weight = torch.randn(248320, 1024) * 0.02
    x = torch.randn(8, 1024)
    ref = F.linear(x, weight)
    variants = [("F.linear M=1", lambda: F.linear(x[:1], weight), ref[:1]),
                ("torch.mv M=1", lambda: torch.mv(weight, x[0])[None], ref[:1]),
                ("F.linear M=8", lambda: F.linear(x, weight), ref),
                ("(W @ x.T).T M=8", lambda: (weight @ x.T).T, ref),
                ("row-chunked 32768 M=8", lambda: torch.cat([F.linear(x, w) for w in weight.split(32768)], 1), ref)]
    print(f"threads={torch.get_num_threads()} load average {os.getloadavg()[0]:.1f}")
    for name, fn, expected in variants:
        seconds = median_time(fn)
        out = fn()
        print(f"{name:24s} {seconds * 1e3:8.1f} ms {weight.numel() * 4 / seconds / 1e9:6.1f} GB/s "
              f"max|diff| vs F.linear {(out - expected).abs().max().item():.2e} bitwise equal {torch.equal(out, expected)}")


if __name__ == "__main__":
    main()
