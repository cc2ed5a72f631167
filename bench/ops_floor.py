"""CPU decode ops at Qwen3.5's real shapes against their own memory-bandwidth floor, reference vs vectorised.

For ``causal_conv1d_update`` and ``fused_recurrent_gated_delta_rule`` (one
decode step on a state pool) at each batch size, this times the readable torch
reference and the vectorised form the torch backend runs on the CPU, side by
side in one process: the two are called alternately, ``--repeats`` times each
after a warm-up, on fresh copies of the same inputs, and the median is kept.
Each op's floor is the bytes it must move (read its inputs and the pool rows
it uses once, write its outputs and those rows once) over the read bandwidth
measured in the same run (``torch.sum`` over a 512 MiB float32 tensor by
default, the median of several passes). Prints one table; the load average is printed
beside it because the shared machine's load changes every number.

    python bench/ops_floor.py [--batches 1 256] [--repeats 7] [--threads N]
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

import torch

from qwen_ops.ops.conv import reference as conv_reference
from qwen_ops.ops.conv import vectorized_update
from qwen_ops.ops.gdn import reference_recurrent, vectorized_recurrent
from qwen_ops.testing import SHAPES, Draw, conv_update_call, gdn_inputs, pool_indices, state_pool
from qwen_ops.testing.bandwidth import read_bandwidth

F32 = torch.float32
BYTES = 4  # float32 throughout (the CPU serving dtype)


def conv_case(batch: int):
    """(arguments, bytes the op must move) for one conv update over ``batch`` requests."""
    shapes = SHAPES["qwen3.5"]
    channels, width = shapes.conv_channels, shapes.conv_width
    draw = Draw(seed=batch)
    arguments = conv_update_call(draw, channels, width, F32, pool_rows=batch + 1, weight_scale=0.5,
                                 cache_indices=pool_indices(draw, batch, batch + 1))
    arguments["activation"] = "silu"
    state_rows = batch * (width - 1) * channels
    moved = BYTES * (2 * state_rows + 2 * batch * channels + channels * (width + 1))  # rows r+w, x, out, w, bias
    return arguments, moved


def gdn_case(batch: int):
    """(arguments, bytes the op must move) for one recurrent decode step over ``batch`` requests."""
    shapes = SHAPES["qwen3.5"]
    hk, hv, dk, dv = shapes.hk, shapes.hv, shapes.dk, shapes.dv
    draw = Draw(seed=batch)
    q, k, v, g, beta = gdn_inputs(draw, batch=batch, tokens=1, hk=hk, hv=hv, dk=dk, dv=dv, l2norm_in_kernel=True)
    arguments = dict(q=q, k=k, v=v, g=g, beta=beta, scale=dk ** -0.5,
                     initial_state=state_pool(draw, batch + 1, hv, dk, dv, scale=0.1), output_final_state=False,
                     cu_seqlens=None, ssm_state_indices=pool_indices(draw, batch, batch + 1),
                     has_initial_state=None, use_qk_l2norm_in_kernel=True)
    inputs = sum(x.numel() for x in (q, k, v, g, beta))
    moved = BYTES * (2 * batch * hv * dk * dv + inputs + batch * hv * dv)  # state rows r+w, inputs, outputs
    return arguments, moved


def time_side_by_side(functions: dict, arguments: dict, repeats: int) -> dict:
    """Median seconds of each function, called alternately on fresh copies of ``arguments``."""
    def fresh():
        return {name: value.clone() if torch.is_tensor(value) else value for name, value in arguments.items()}

    for fn in functions.values():  # warm-up
        fn(**fresh())
    times = {name: [] for name in functions}
    for _ in range(repeats):
        for name, fn in functions.items():
            call = fresh()
            start = time.perf_counter()
            fn(**call)
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(ts) for name, ts in times.items()}


OPS = {
    "causal_conv1d_update": (conv_case, conv_reference.causal_conv1d_update, vectorized_update.causal_conv1d_update),
    "fused_recurrent_gated_delta_rule": (gdn_case, reference_recurrent.fused_recurrent_gated_delta_rule,
                                         vectorized_recurrent.fused_recurrent_gated_delta_rule),
}


def main(argv=None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 256])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's)")
    parser.add_argument("--bandwidth-mib", type=int, default=512, help="size of the torch.sum bandwidth probe")
    parser.add_argument("--ops", nargs="+", default=list(OPS), choices=list(OPS))
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)

    bandwidth = read_bandwidth(args.bandwidth_mib << 20, args.repeats)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, load average {os.getloadavg()[0]:.1f} "
          f"at start; read bandwidth (torch.sum, {args.bandwidth_mib} MiB) {bandwidth / 1e9:.1f} GB/s; median of {args.repeats}")
    print("| op | batch | MB moved | floor (ms) | reference (ms) | vectorised (ms) | ref/vec | vec/floor |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    rows = []
    for op in args.ops:
        make_case, reference_fn, vectorized_fn = OPS[op]
        for batch in args.batches:
            arguments, moved = make_case(batch)
            median = time_side_by_side({"reference": reference_fn, "vectorised": vectorized_fn}, arguments,
                                       args.repeats)
            floor = moved / bandwidth
            row = dict(op=op, batch=batch, moved=moved, floor=floor, **median)
            rows.append(row)
            print(f"| {op} | {batch} | {moved / 1e6:.2f} | {floor * 1e3:.3f} | {median['reference'] * 1e3:.2f} "
                  f"| {median['vectorised'] * 1e3:.2f} | {median['reference'] / median['vectorised']:.1f}x "
                  f"| {median['vectorised'] / floor:.1f}x |", flush=True)
    print(f"load average {os.getloadavg()[0]:.1f} at end")
    return rows


if __name__ == "__main__":
    main()
