"""``attention_decode_step``'s C++ operator against the two ops it stands for, on the CPU, side by side in one run.

Per decode batch and dtype, on Qwen3.5's full-attention layer (8 query / 2 KV heads of 256, blocks of 16,
``--context`` cached tokens per request): ``reshape_and_cache`` then ``mixed_attention`` (all rows decodes)
inside ``trusted_metadata()``, as the engine calls them, against one ``attention_decode_step`` call; the
median of ``--repeats`` rounds of ``--calls`` calls each, alternating, after a warm-up; and whether the two
give the same bits.

    python bench/kernels/bench_attention_decode_step.py --batches 1,16 --dtypes float32,bfloat16
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

import torch

from qwen_ops import ops

HQ, HKV, D, BS = 8, 2, 256, 16


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--batches", default="1,16")
    p.add_argument("--dtypes", default="float32,bfloat16")
    p.add_argument("--context", type=int, default=128)
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--calls", type=int, default=100)
    p.add_argument("--threads", type=int, default=2)
    return p.parse_args(argv)


def case(batch: int, dtype: torch.dtype, context: int, gen: torch.Generator) -> dict:
    per_request = (context + BS) // BS
    key_cache = torch.randn(batch * per_request, HKV, BS, D, generator=gen).to(dtype)
    block_tables = torch.arange(batch * per_request, dtype=torch.int32).view(batch, per_request)
    seq_lens = torch.full((batch,), context + 1, dtype=torch.int32)
    newest = seq_lens.long() - 1
    slots = block_tables.long()[torch.arange(batch), newest // BS] * BS + newest % BS
    return dict(query=torch.randn(batch, HQ, D, generator=gen).to(dtype),
                key=torch.randn(batch, HKV, D, generator=gen).to(dtype),
                value=torch.randn(batch, HKV, D, generator=gen).to(dtype), key_cache=key_cache,
                value_cache=torch.randn(key_cache.shape, generator=gen).to(dtype), slot_mapping=slots,
                block_tables=block_tables, seq_lens=seq_lens,
                query_start_loc=torch.arange(batch + 1, dtype=torch.int32))


def two_ops(a):
    with ops.trusted_metadata():
        ops.reshape_and_cache(a["key"], a["value"], a["key_cache"], a["value_cache"], a["slot_mapping"])
        return ops.mixed_attention(a["query"], a["key"], a["value"], a["key_cache"], a["value_cache"],
                                   a["block_tables"], a["query_start_loc"], a["seq_lens"], a["query"].shape[0])


def one_op(a):
    return ops.attention_decode_step(a["query"], a["key"], a["value"], a["key_cache"], a["value_cache"],
                                     a["slot_mapping"], a["block_tables"], a["seq_lens"])


def per_call_us(fn, a, calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        fn(a)
    return (time.perf_counter() - start) / calls * 1e6


def main(argv=None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    gen = torch.Generator().manual_seed(0)
    print(f"load average at start: {' '.join(f'{v:.2f}' for v in os.getloadavg())}; {args.threads} threads")
    print("| batch | dtype | two ops (trusted) us | attention_decode_step us | ratio | same bits |")
    print("|---:|---|---:|---:|---:|---|")
    for dtype_name in args.dtypes.split(","):
        dtype = getattr(torch, dtype_name)
        for batch in (int(b) for b in args.batches.split(",")):
            a = case(batch, dtype, args.context, gen)
            same = torch.equal(two_ops(a), one_op(a))
            times = {two_ops: [], one_op: []}
            for _ in range(args.repeats):
                for fn in times:
                    times[fn].append(per_call_us(fn, a, args.calls))
            two, one = (statistics.median(times[fn]) for fn in (two_ops, one_op))
            print(f"| {batch} | {dtype_name} | {two:.1f} | {one:.1f} | {two / one:.2f}x | {same} |")
    print(f"load average at end: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
