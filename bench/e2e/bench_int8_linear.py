"""The decode-path projections of the Qwen3.5-0.8B shape with INT8 weights against float ones, on the CPU.

    python bench/e2e/bench_int8_linear.py [--rows 1,16] [--repeats 7] [--stream-mb 128] [--threads 1]
                                          [--dtype float32|bfloat16]

For each projection shape of the 0.8B model ([N, K]) and each number of rows M, the variants run
interleaved (A B C D E A B C D E ..., so a shared machine's load hits them alike) over enough copies of the
weight (``--stream-mb`` per variant, past the last-level cache) that every call reads its weight from
memory, as a decode step does: ``small_m_linear`` on float weights of ``--dtype`` (the engine's decode path
for that dtype), INT8 weight-only and W8A8 (per-token activation quantization included) through
``ops.int8_linear`` (the C++ AVX-512 VNNI kernel where the CPU has it; for bfloat16 x the AVX-512 BF16 one),
bfloat16 only: the same with x widened to float32 for the float32 kernel, the weight dequantized for the
call and F.linear (what the model does with a weight-only projection past ``WEIGHT_ONLY_KERNEL_MAX_ROWS``
rows), and ``torch.sum`` over an int8 weight copy's bytes viewed as float32 (a plain stream of the INT8
bytes). Prints the median time per call, the weight bytes over it (GB/s) and the ratio to the float
weights' time, with the load average. Nothing is asserted.
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

import torch

import torch.nn.functional as F

from qwen_ops.ops import int8_linear, quantize_per_token
from qwen_ops.ops.int8_linear.reference import dequantize_weight
from qwen_ops.ops.linear import small_m_linear
from qwen_ops.model.loading.quantization import Int8Weight
from qwen_ops.model.network.layers import int8_projection

# [N, K] of the 0.8B model's projections: MLP gate/up and down, GDN in_proj_qkv, attention q (with its gate).
SHAPES = {"mlp gate/up": (3584, 1024), "mlp down": (1024, 3584), "gdn in_proj_qkv": (6144, 1024),
          "attn q_proj": (4096, 1024)}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", default="1,16")
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--stream-mb", type=int, default=128)
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    p.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32", help="x and the float weights")
    args = p.parse_args(argv)
    dtype = getattr(torch, args.dtype)
    base_name = f"{args.dtype} small_m_linear"
    if args.threads:
        torch.set_num_threads(args.threads)
    gen = torch.Generator().manual_seed(0)
    print(f"threads={torch.get_num_threads()} load average: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    print(f"| shape [N, K] | M | variant | median ms | weight GB/s | time / {args.dtype} |")
    print("|---|---|---|---|---|---|")
    for label, (n, k) in SHAPES.items():
        float_bytes = n * k * dtype.itemsize
        copies = max(2, (args.stream_mb << 20) // float_bytes)
        w_float = [(torch.randn(n, k, generator=gen) / k ** 0.5).to(dtype) for _ in range(copies)]
        w8 = [torch.randint(-127, 128, (n, k), generator=gen, dtype=torch.int8) for _ in range(4 * copies)]
        scale = torch.full((n,), 0.01)
        int8_weights = [Int8Weight(weight=w, weight_scale=scale, scheme="W8A16") for w in w8]
        for m in (int(r) for r in args.rows.split(",")):
            x = torch.randn(m, k, generator=gen).to(dtype)
            variants = {
                base_name: (float_bytes, lambda i: small_m_linear(x, w_float[i % len(w_float)])),
                "INT8 weight-only": (n * k, lambda i: int8_linear(x, w8[i % len(w8)], scale)),
                # The model's call (layers.int8_projection): the same kernel as a C++ operator where it serves.
                "INT8 weight-only, the model's call": (
                    n * k, lambda i: int8_projection(x, int8_weights[i % len(w8)])),
                "W8A8 (+ per-token quant)": (n * k, lambda i: _w8a8(x, w8[i % len(w8)], scale)),
                # What the model does with a weight-only projection past WEIGHT_ONLY_KERNEL_MAX_ROWS rows.
                "INT8 weight-only, dequantized + F.linear": (
                    n * k, lambda i: F.linear(x, dequantize_weight(w8[i % len(w8)], scale).to(dtype))),
                "torch.sum of the INT8 bytes": (n * k, lambda i: w8[i % len(w8)].view(torch.float32).sum()),
            }
            if dtype == torch.bfloat16:  # the float32 kernel on x widened, what bfloat16 x ran before its kernel
                variants["INT8 weight-only, x widened to float32"] = (
                    n * k, lambda i: int8_linear(x.float(), w8[i % len(w8)], scale).to(dtype))
            times = {name: [] for name in variants}
            for name, (_, call) in variants.items():  # warm up
                call(0)
            for r in range(args.repeats):
                for name, (_, call) in variants.items():
                    start = time.perf_counter()
                    for i in range(len(w8)):
                        call(r + i)
                    times[name].append((time.perf_counter() - start) / len(w8))
            base = statistics.median(times[base_name])
            for name, (nbytes, _) in variants.items():
                t = statistics.median(times[name])
                print(f"| {label} [{n}, {k}] | {m} | {name} | {t * 1e3:.3f} | {nbytes / t / 1e9:.1f} | {t / base:.2f} |")
    print(f"load average after: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    return 0


def _w8a8(x, weight, scale):
    q, token_scale = quantize_per_token(x)
    return int8_linear(q, weight, scale, x_scale=token_scale)


if __name__ == "__main__":
    raise SystemExit(main())
