"""The decode-path projections of the Qwen3.5-0.8B shape: F.linear against qwen_ops' small-M CPU kernel.

    python bench/e2e/bench_small_m_linear.py [--rows 1,8] [--repeats 5] [--shapes all|lm_head] [--dtype bfloat16]
    python bench/e2e/bench_small_m_linear.py --sweep [--sweep-rows 1,2,4,...] [--repeats 5] [--threads 1 --timer cpu]

--sweep times F.linear against the kernel over numbers of rows M for one K = 128 shape (the tiny default
model's lm_head, [248320, 128]) and K = 1024 / 3584 shapes of the 0.8B model, and prints for each shape
the largest M up to which the kernel is faster at every M (the crossover that SMALL_M_MAX_ROWS follows).

For each weight shape of the model's projections ([N, K] float32, random) and each number of rows M,
the variants run interleaved over enough copies of the weight (``--stream-bytes`` in all, more than
the last-level cache) that every call reads its weight from memory, as a decode step does (it reads
3 GB of weights in turn); one weight called again and again would be timed from the cache. The variants run (A B C A B C ..., so a shared machine's load hits them alike): F.linear
(MKL), ``(W @ x.T).T`` and ``torch.ops.qwen_ops.small_m_linear`` with each instruction set this CPU
runs, and ``torch.sum`` over the same weight copy (a plain stream of the same bytes; on a loaded
machine torch's 2-thread sum of a few MB can stall for a scheduler tick, so the rate is also given
against the read bandwidth of the 512 MB pass, the floor's denominator). Prints the median time, the
weight bytes over that time (GB/s), the ratio to F.linear, the rate against the same-bytes torch.sum's
and against the read bandwidth, and the largest difference from F.linear's result. The last lines weight the shapes by how often a decode
step runs them (18 GDN + 6 attention layers, 24 MLPs, one lm_head) into a per-step projection time,
beside the weights' bytes over ``torch.sum``'s read bandwidth measured in the same run.
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

import torch

from qwen_ops.testing.bandwidth import read_bandwidth

F = torch.nn.functional

# name: (N, K, times per decode step) for the 0.8B shape (bench_vs_transformers.QWEN3_5_0P8B).
SHAPES = {
    "gdn in_proj_qkv": (6144, 1024, 18), "gdn in_proj_z": (2048, 1024, 18), "gdn in_proj_a/b": (16, 1024, 36),
    "gdn out_proj": (1024, 2048, 18), "attn q_proj": (4096, 1024, 6), "attn k/v_proj": (512, 1024, 12),
    "attn o_proj": (1024, 2048, 6), "mlp gate/up": (3584, 1024, 48), "mlp down": (1024, 3584, 24),
    "lm_head": (248320, 1024, 1),
}


def variants(isas):
    from qwen_ops import _C

    out = {"F.linear": F.linear, "(W @ x.T).T": lambda x, w: (w @ x.T).T}
    for isa in isas:
        out[f"small_m_linear[{isa}]"] = lambda x, w, isa=isa: _C.small_m_linear_isa(x, w, None, isa)
    return out


SUM = "torch.sum (same bytes)"

# The M sweep's shapes: (name, N, K).
SWEEP_SHAPES = [("tiny lm_head", 248320, 128), ("0.8B mlp gate/up", 3584, 1024), ("0.8B gdn in_proj_qkv", 6144, 1024),
                ("0.8B mlp down", 1024, 3584)]


def interleaved_medians(fns, x, weights, repeats, clock=time.perf_counter):
    """Median time of each ``fn(x, w)``; each call takes the next weight copy (round robin, uncached)."""
    calls = 0
    for fn in fns.values():
        fn(x, weights[calls % len(weights)])  # warm-up
        calls += 1
    times = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            w = weights[calls % len(weights)]
            calls += 1
            t0 = clock()
            fn(x, w)
            times[name].append(clock() - t0)
    return {name: statistics.median(t) for name, t in times.items()}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", default="1,8", help="numbers of rows M, comma separated")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--shapes", default="all", choices=("all", "lm_head"))
    p.add_argument("--isas", default=None, help="instruction sets to time (default: the best this CPU runs; "
                   "bfloat16: 'portable' or 'avx512_bf16')")
    p.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"),
                   help="the weights' and x's dtype (bfloat16: F.linear is oneDNN's, the kernel vdpbf16ps)")
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--stream-bytes", type=int, default=256 << 20, help="bytes of weight copies cycled per shape")
    p.add_argument("--sweep", action="store_true", help="the M sweep against F.linear instead of the shape table")
    p.add_argument("--sweep-rows", default="1,2,4,8,12,16,24,32,40,48,64,80,96,128")
    p.add_argument("--timer", default="wall", choices=("wall", "cpu"),
                   help="--sweep: wall clock, or the process's CPU time (with --threads 1 on a loaded machine: "
                        "time spent descheduled does not count)")
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    from qwen_ops import _C

    dtype = getattr(torch, args.dtype)
    best = _C.small_m_linear_bf16_variants()[-1] if dtype == torch.bfloat16 else _C.cpu_best_isa()
    isas = args.isas.split(",") if args.isas else [best]
    if args.sweep:
        return sweep(args, isas[-1])
    shapes = SHAPES if args.shapes == "all" else {"lm_head": SHAPES["lm_head"]}
    bandwidth = read_bandwidth(statistic=min)
    esize = torch.empty((), dtype=dtype).element_size()
    print(f"dtype={args.dtype} threads={torch.get_num_threads()} isas={isas} read bandwidth (torch.sum, best pass) "
          f"{bandwidth / 1e9:.1f} GB/s; load average {' '.join(f'{v:.1f}' for v in os.getloadavg())}")
    print("| shape [N, K] | M | variant | median ms | GB/s | vs F.linear | rate / same-bytes torch.sum's | "
          "rate / read bandwidth | max abs diff vs F.linear |")
    print("|---|---|---|---|---|---|---|---|---|")
    gen = torch.Generator().manual_seed(0)
    per_step = {}
    for m in (int(r) for r in args.rows.split(",")):
        for name, (n, k, count) in shapes.items():
            w = (torch.randn(n, k, generator=gen) / k ** 0.5).to(dtype)
            weights = [w] + [w.clone() for _ in range(max(0, -(-args.stream_bytes // (n * k * esize)) - 1))]
            x = torch.randn(m, k, generator=gen).to(dtype)
            fns = variants(isas)
            fns[SUM] = lambda x, w: w.sum()
            medians = interleaved_medians(fns, x, weights, args.repeats)
            ref = F.linear(x, w).float()
            for v, seconds in medians.items():
                diff = "" if v == SUM else f"{(fns[v](x, w).float() - ref).abs().max().item():.1e}"
                print(f"| {name} [{n}, {k}] | {m} | {v} | {seconds * 1e3:.3f} | {w.numel() * esize / seconds / 1e9:.1f} | "
                      f"{medians['F.linear'] / seconds:.2f}x | {medians[SUM] / seconds:.2f} | "
                      f"{w.numel() * esize / seconds / bandwidth:.2f} | {diff} |", flush=True)
                per_step[(m, v)] = per_step.get((m, v), 0.0) + count * seconds
            del w, weights
    weight_bytes = sum(n * k * esize * c for n, k, c in shapes.values())
    print(f"\nper decode step ({'the lm_head only' if args.shapes == 'lm_head' else 'every projection'}, "
          f"{weight_bytes / 1e9:.2f} GB of weights; floor {weight_bytes / bandwidth * 1e3:.1f} ms at "
          f"{bandwidth / 1e9:.1f} GB/s):")
    for (m, v), seconds in per_step.items():
        print(f"  M={m} {v}: {seconds * 1e3:.1f} ms ({seconds * bandwidth / weight_bytes:.2f}x the floor)")
    print(f"load average at the end {os.getloadavg()[0]:.1f}")


def sweep(args, isa):
    """F.linear against the kernel over M for each SWEEP_SHAPES shape; prints the crossover per shape."""
    from qwen_ops import _C

    fns = {"F.linear": F.linear, "kernel": lambda x, w: _C.small_m_linear_isa(x, w, None, isa)}
    clock = time.perf_counter if args.timer == "wall" else time.process_time
    print(f"threads={torch.get_num_threads()} isa={isa} timer={args.timer}; load average {' '.join(f'{v:.1f}' for v in os.getloadavg())}")
    print("| shape [N, K] | M | F.linear ms | kernel ms | kernel speed-up |")
    print("|---|---|---|---|---|")
    gen = torch.Generator().manual_seed(0)
    for name, n, k in SWEEP_SHAPES:
        w = torch.randn(n, k, generator=gen) / k ** 0.5
        weights = [w] + [w.clone() for _ in range(max(0, -(-args.stream_bytes // (n * k * 4)) - 1))]
        crossover, unbroken = 0, True
        for m in (int(r) for r in args.sweep_rows.split(",")):
            medians = interleaved_medians(fns, torch.randn(m, k, generator=gen), weights, args.repeats, clock)
            speedup = medians["F.linear"] / medians["kernel"]
            unbroken = unbroken and speedup > 1
            if unbroken:
                crossover = m
            print(f"| {name} [{n}, {k}] | {m} | {medians['F.linear'] * 1e3:.3f} | {medians['kernel'] * 1e3:.3f} | "
                  f"{speedup:.2f}x |", flush=True)
        print(f"| {name} [{n}, {k}] | kernel faster at every M up to | {crossover} | | |")
        del w, weights
    print(f"load average at the end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
