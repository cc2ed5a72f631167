"""Every CPU-path op at Qwen3.5-0.8B's real shapes against its own floor: the torch backend vs the reference.

For each op the torch backend serves on the CPU and each workload (decode at
batch 1 and 256, prefill of 8192 tokens), this times what ``backend="torch"``
runs on CPU tensors (``ops._backend.resolve``) and, where that is a faster
form than the readable reference, the reference too, side by side in one
process; where the backend runs a C++ kernel of ``qwen_ops._C`` first (GDN
decode step, conv update, KV cache write, decode attention and the decode rows
of mixed attention), also the torch form it falls back to without one.
They are called alternately, ``--repeats`` times each after a warm-up, on
fresh copies of the arguments the op writes, and the median is kept. Shapes are ``SHAPES["qwen3.5-0.8b"]`` (8 query / 2 KV heads of 256, KV
blocks of 16; GDN 16 / 16 heads of 128; conv 6144 channels, width 4), float32
(the CPU serving dtype), decode attention over ``--context`` cached tokens per
request.

Each op's floor is the larger of

* bytes it must move (read every input once, write every output once, read
  and write each used state or pool row once) over the read bandwidth
  (``torch.sum`` over ``--bandwidth-mib`` MiB float32), and
* the FLOPs of its matrix products over the float32 matmul rate (``torch.mm``
  of two 2048 x 2048 matrices),

both measured in the same run (the median of several passes). Also measured:
the cost of one call into a torch op that does nothing (``torch_op_call_seconds``),
the last column's unit: where a floor is a few of those (decode at batch 1),
the call overhead, not bandwidth, is what limits the op. Prints one
table with the load average, since the shared machine's load changes every
number; only the ratios within one run are comparable.

    python bench/ops_floor.py [--workloads decode1 decode256 prefill8192] [--ops ...] [--repeats 5]
                              [--threads N] [--context 512] [--no-reference]
"""
from __future__ import annotations

import argparse
import importlib
import os
import statistics
import time
from dataclasses import dataclass, field
from typing import Callable

import torch

from qwen_ops.ops._backend import IMPLEMENTATIONS, _load, resolve
from qwen_ops.testing import (SHAPES, Draw, cache_write_call, conv_fn_call, conv_update_call, decode_call,
                              gating_inputs, gdn_inputs, mixed_call, pool_indices, prefill_call, state_pool)
from qwen_ops.testing.bandwidth import read_bandwidth

F32 = torch.float32
INT8 = torch.int8
SHAPE = SHAPES["qwen3.5-0.8b"]
CPU = torch.device("cpu")
PREFILL_TOKENS = 8192
MIXED_CHUNK = 512  # the prefill chunk a mixed step carries beside its decodes
REFERENCES = {  # the readable definition of each op the torch backend runs in a faster form
    "fused_recurrent_gated_delta_rule": "gdn.reference_recurrent:fused_recurrent_gated_delta_rule",
    "causal_conv1d_update": "conv.reference:causal_conv1d_update",
    "causal_conv1d_fn": "conv.reference:causal_conv1d_fn",
    "paged_decode_attention": "attention.reference:paged_decode_attention",
    "prefill_attention": "attention.reference:prefill_attention",
    "mixed_attention": "attention.reference:mixed_attention",
    "chunk_gated_delta_rule": "gdn.reference_chunk:chunk_gated_delta_rule",
    "reshape_and_cache": "cache.reference:reshape_and_cache",
    "fused_gdn_gating": "gdn.reference_gating:fused_gdn_gating",
}


# Ops whose torch backend calls a C++ kernel of qwen_ops._C first: the module whose ``_kernel`` it asks for it.
KERNEL_MODULES = {
    "fused_recurrent_gated_delta_rule": "qwen_ops.ops.gdn.cpu_decode_kernel",
    "causal_conv1d_update": "qwen_ops.ops.conv.cpu_update_kernel",
    "reshape_and_cache": "qwen_ops.ops.cache.cpu_write_kernel",
    "paged_decode_attention": "qwen_ops.ops.attention.cpu_decode_kernel",
    "mixed_attention": "qwen_ops.ops.attention.cpu_decode_kernel",  # its decode rows
}


def without_kernel(fn: Callable, module_name: str) -> Callable:
    """``fn`` with its C++ kernel hidden: the torch form it falls back to (what the backend ran before the kernel)."""
    module = importlib.import_module(module_name)

    def torch_form(**arguments):
        saved = module._kernel
        module._kernel = lambda: None
        try:
            return fn(**arguments)
        finally:
            module._kernel = saved

    return torch_form


@dataclass
class Case:
    op: str
    label: str
    arguments: dict
    moved: int  # bytes that must cross memory
    flops: float = 0.0  # of the matrix products
    writes: tuple = field(default=())  # arguments the op writes in place (copied fresh for every call)


def _bytes(*tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors if t is not None)


def _kv_bytes(arguments, tokens: int) -> int:
    """Bytes of ``tokens`` cached K and V tokens (all KV heads), plus the int8 scales if any."""
    cache = arguments["key_cache"]
    per_token = cache.shape[1] * cache.shape[3] * cache.element_size()
    return 2 * tokens * per_token + _bytes(arguments.get("k_scale"), arguments.get("v_scale"))


def _attention_flops(query_rows: int, keys_per_row: float) -> float:
    """q.k and p.v: 2 * 2 * D flops per (query head, row, key)."""
    return 4.0 * SHAPE.hq * SHAPE.head_dim * query_rows * keys_per_row


def conv_update(batch, draw):
    channels, width = SHAPE.conv_channels, SHAPE.conv_width
    arguments = conv_update_call(draw, channels, width, F32, pool_rows=batch + 1, weight_scale=0.5,
                                 cache_indices=pool_indices(draw, batch, batch + 1))
    arguments["activation"] = "silu"
    rows = 2 * arguments["conv_states"][:batch].numel() * 4  # the used rows, read and written
    return Case("causal_conv1d_update", f"decode {batch}", arguments,
                rows + 2 * _bytes(arguments["x"]) + _bytes(arguments["weight"], arguments["bias"]),
                writes=("conv_states",))


def conv_fn(tokens, draw):
    channels, width = SHAPE.conv_channels, SHAPE.conv_width
    arguments = conv_fn_call(draw, [tokens], channels, width, F32, pool_rows=2, cache_indices=[1],
                             has_initial_state=[True], weight_scale=0.5)
    arguments["activation"] = "silu"
    row = 2 * arguments["conv_states"][1].numel() * 4
    return Case("causal_conv1d_fn", f"prefill {tokens}", arguments,
                row + 2 * _bytes(arguments["x"]) + _bytes(arguments["weight"], arguments["bias"]),
                writes=("conv_states",))


def _gdn_arguments(draw, batch, tokens, pool_rows):
    q, k, v, g, beta = gdn_inputs(draw, batch=batch, tokens=tokens, hk=SHAPE.hk, hv=SHAPE.hv, dk=SHAPE.dk,
                                  dv=SHAPE.dv, l2norm_in_kernel=True)
    return dict(q=q, k=k, v=v, g=g, beta=beta, scale=SHAPE.dk ** -0.5,
                initial_state=state_pool(draw, pool_rows, SHAPE.hv, SHAPE.dk, SHAPE.dv, scale=0.1),
                output_final_state=False, cu_seqlens=None,
                ssm_state_indices=pool_indices(draw, batch, pool_rows), has_initial_state=None,
                use_qk_l2norm_in_kernel=True)


def gdn_decode(batch, draw):
    arguments = _gdn_arguments(draw, batch, 1, batch + 1)
    state_rows = 2 * batch * SHAPE.hv * SHAPE.dk * SHAPE.dv * 4
    inputs = _bytes(*(arguments[n] for n in ("q", "k", "v", "g", "beta")))
    return Case("fused_recurrent_gated_delta_rule", f"decode {batch}", arguments,
                state_rows + inputs + _bytes(arguments["v"]), writes=("initial_state",))


def gdn_chunk(tokens, draw):
    arguments = _gdn_arguments(draw, 1, tokens, 2)
    state_rows = 2 * SHAPE.hv * SHAPE.dk * SHAPE.dv * 4
    inputs = _bytes(*(arguments[n] for n in ("q", "k", "v", "g", "beta")))
    # The chunked (WY) algorithm's matrix products, per chunk of C = 64 and value head: K K^T, Q K^T, T (beta e^g K),
    # T (beta V), and against the [Dk, Dv] state W S, Q S, K^T V_new, plus (QK^T) V_new.
    c, dk, dv = 64, SHAPE.dk, SHAPE.dv
    per_chunk = 2 * c * c * (3 * dk + 2 * dv) + 3 * 2 * c * dk * dv
    flops = float(per_chunk * (-(-tokens // c)) * SHAPE.hv)
    return Case("chunk_gated_delta_rule", f"prefill {tokens}", arguments, state_rows + inputs + _bytes(arguments["v"]),
                flops, writes=("initial_state",))


def gating(tokens, draw, phase):
    arguments = gating_inputs(draw, tokens, SHAPE.hv, F32)
    moved = _bytes(*arguments.values()) + 2 * _bytes(arguments["a"])  # inputs, g and beta
    return Case("fused_gdn_gating", f"{phase} {tokens}", arguments, moved)


def decode_attention(batch, draw, context, cache_dtype):
    arguments = decode_call(draw, F32, cache_dtype, SHAPE.hq, SHAPE.hkv, SHAPE.head_dim, SHAPE.block_size,
                            [context] * batch)
    arguments["scale"] = SHAPE.head_dim ** -0.5
    moved = _kv_bytes(arguments, batch * context) + 2 * _bytes(arguments["query"]) + _bytes(arguments["block_tables"])
    name = "int8 KV" if cache_dtype == INT8 else "float KV"
    return Case("paged_decode_attention", f"decode {batch}, {name}", arguments, moved,
                _attention_flops(batch, context))


def prefill_attention(tokens, draw):
    arguments = prefill_call(draw, F32, F32, SHAPE.hq, SHAPE.hkv, SHAPE.head_dim, SHAPE.block_size, [tokens])
    arguments.update(scale=SHAPE.head_dim ** -0.5, causal=True)
    moved = _bytes(arguments["query"], arguments["key"], arguments["value"]) + _bytes(arguments["query"])
    return Case("prefill_attention", f"prefill {tokens}", arguments, moved,
                _attention_flops(tokens, (tokens + 1) / 2))  # causal: row i sees i + 1 keys


def mixed_attention(batch, draw, context):
    q_lens = [1] * batch + [MIXED_CHUNK]
    seq_lens = [context] * batch + [context + MIXED_CHUNK]
    arguments = mixed_call(draw, F32, F32, SHAPE.hq, SHAPE.hkv, SHAPE.head_dim, SHAPE.block_size, q_lens, seq_lens,
                           batch)
    arguments["scale"] = SHAPE.head_dim ** -0.5
    cached = batch * context + context
    moved = _kv_bytes(arguments, cached) + _bytes(arguments["query"], arguments["key"], arguments["value"]) \
        + _bytes(arguments["query"])
    flops = _attention_flops(batch, context) + _attention_flops(MIXED_CHUNK, context + (MIXED_CHUNK + 1) / 2)
    return Case("mixed_attention", f"{batch} decodes + {MIXED_CHUNK}-token chunk", arguments, moved, flops)


def cache_write(tokens, draw, cache_dtype, phase):
    blocks = -(-tokens // SHAPE.block_size) + 1
    arguments = cache_write_call(draw, tokens=tokens, hkv=SHAPE.hkv, head_dim=SHAPE.head_dim,
                                 block_size=SHAPE.block_size, num_blocks=blocks, dtype=F32, cache_dtype=cache_dtype)
    written = tokens * SHAPE.hkv * SHAPE.head_dim * arguments["key_cache"].element_size() * 2
    moved = _bytes(arguments["key"], arguments["value"], arguments["slot_mapping"], arguments["k_scale"],
                   arguments["v_scale"]) + written
    name = "int8 KV" if cache_dtype == INT8 else "float KV"
    return Case("reshape_and_cache", f"{phase} {tokens}, {name}", arguments, moved,
                writes=("key_cache", "value_cache"))


def cases(workload: str, context: int) -> list[Callable[[], Case]]:
    """Builders (called lazily, one case in memory at a time) of the cases of one workload."""
    draw = lambda: Draw(seed=7)  # noqa: E731 - the same inputs for every run
    if workload.startswith("decode"):
        b = int(workload[len("decode"):])
        return [lambda: conv_update(b, draw()), lambda: gdn_decode(b, draw()), lambda: gating(b, draw(), "decode"),
                lambda: decode_attention(b, draw(), context, F32), lambda: decode_attention(b, draw(), context, INT8),
                lambda: mixed_attention(b, draw(), context),
                lambda: cache_write(b, draw(), F32, "decode"), lambda: cache_write(b, draw(), INT8, "decode")]
    t = int(workload[len("prefill"):])
    return [lambda: conv_fn(t, draw()), lambda: gdn_chunk(t, draw()), lambda: gating(t, draw(), "prefill"),
            lambda: prefill_attention(t, draw()), lambda: cache_write(t, draw(), F32, "prefill"),
            lambda: cache_write(t, draw(), INT8, "prefill")]


def time_side_by_side(functions: dict, case: Case, repeats: int) -> dict:
    """Median seconds of each function, called alternately, on fresh copies of what the op writes."""
    def fresh():
        return {name: value.clone() if name in case.writes else value for name, value in case.arguments.items()}

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


def matmul_rate(repeats: int, size: int = 2048) -> float:
    """float32 FLOP/s of ``torch.mm`` on two ``size`` x ``size`` matrices (median of ``repeats`` passes)."""
    a, b = torch.randn(size, size), torch.randn(size, size)
    out = torch.mm(a, b)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        torch.mm(a, b, out=out)
        times.append(time.perf_counter() - start)
    return 2.0 * size ** 3 / statistics.median(times)


def torch_op_call_seconds(calls: int = 2000, repeats: int = 5) -> float:
    """Seconds of one call from Python into a torch op that does no work (``torch.ops.aten.alias``, a view).

    The fixed cost every op call pays here (Python -> dispatcher -> kernel -> a new tensor object): floors
    below a few of these (the decode-1 cells) cannot be reached by any form that makes even one torch call.
    Median over ``repeats`` loops of ``calls`` calls each.
    """
    x = torch.zeros(16)
    alias = torch.ops.aten.alias.default
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            alias(x)
        times.append((time.perf_counter() - start) / calls)
    return statistics.median(times)


def main(argv=None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", nargs="+", default=["decode1", "decode256", "prefill8192"],
                        help="decodeB (B requests, one token each) or prefillT (one sequence of T tokens)")
    parser.add_argument("--ops", nargs="+", default=None, choices=sorted(REFERENCES), help="default: all")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's)")
    parser.add_argument("--context", type=int, default=512, help="cached tokens per decoding request")
    parser.add_argument("--bandwidth-mib", type=int, default=512, help="size of the torch.sum bandwidth probe")
    parser.add_argument("--no-reference", action="store_true", help="time only what the torch backend runs")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)

    bandwidth = read_bandwidth(args.bandwidth_mib << 20, args.repeats)
    rate = matmul_rate(args.repeats)
    call = torch_op_call_seconds()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, load average {os.getloadavg()[0]:.1f} at "
          f"start; read bandwidth (torch.sum, {args.bandwidth_mib} MiB) {bandwidth / 1e9:.1f} GB/s; matmul "
          f"(torch.mm 2048^2) {rate / 1e9:.1f} GFLOP/s; one empty torch op call (torch.ops.aten.alias) "
          f"{call * 1e6:.2f} us; median of {args.repeats}; decode context {args.context}")
    print("| op | workload | MB moved | GFLOP | floor (ms) | bound | reference (ms) | torch form, no C++ kernel (ms) "
          "| torch backend (ms) | ref/backend | backend/floor | backend/one op call |")
    print("|---|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|")
    rows = []
    for workload in args.workloads:
        for build in cases(workload, args.context):
            case = build()
            if args.ops and case.op not in args.ops:
                continue
            backend = resolve(case.op, "torch", CPU)
            reference = _load(REFERENCES[case.op])
            functions = {"backend": backend}
            if reference is not backend and not args.no_reference:
                functions["reference"] = reference
            kernel_module = KERNEL_MODULES.get(case.op)
            has_kernel = kernel_module is not None and importlib.import_module(kernel_module)._kernel() is not None
            if has_kernel:
                functions["torch form"] = without_kernel(backend, kernel_module)
            median = time_side_by_side(functions, case, args.repeats)
            by_bytes, by_flops = case.moved / bandwidth, case.flops / rate
            floor = max(by_bytes, by_flops)
            ref = median.get("reference")
            row = dict(op=case.op, workload=case.label, moved=case.moved, flops=case.flops, floor=floor,
                       bound="bytes" if by_bytes >= by_flops else "FLOPs", call=call, **median)
            rows.append(row)
            same = reference is backend
            ref_text = "(is the backend)" if same else ("-" if ref is None else f"{ref * 1e3:.2f}")
            speedup = "-" if ref is None else f"{ref / median['backend']:.1f}x"
            form = median.get("torch form")
            form_text = "(no kernel)" if form is None else f"{form * 1e3:.2f}"
            print(f"| {case.op} | {case.label} | {case.moved / 1e6:.2f} | {case.flops / 1e9:.2f} | {floor * 1e3:.3f} "
                  f"| {row['bound']} | {ref_text} | {form_text} | {median['backend'] * 1e3:.2f} | {speedup} "
                  f"| {median['backend'] / floor:.1f}x | {median['backend'] / call:.0f} |", flush=True)
            del case
    print(f"load average {os.getloadavg()[0]:.1f} at end")
    return rows


if __name__ == "__main__":
    main()
