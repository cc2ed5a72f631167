#!/usr/bin/env python3
"""Device check of every Triton kernel of qwen_ops: correctness, then speed against peers.

Run by ``bench/device_check.sh`` on a lent NVIDIA GPU (an H200); one call of
a few minutes:

1. ceilings: a measured device-to-device copy bandwidth (bytes read plus
   written) and a measured large bf16 matrix-product rate, on random data;
2. correctness: every op with ``backend="triton"`` against ``backend="torch"``
   on the device, every case in bfloat16 (bf16 ``tl.dot`` can only be checked
   on a device) and the first case of each op in float16 and float32 too,
   with INT8 KV caches, split-KV decode, state pools and padding, within
   ``tests/tolerances.py:KERNEL_VS_REFERENCE``; mutated caches and state pools
   are compared too. Autotuning is off here (one config, one compilation per
   kernel variant) and on for the timing pass, which tunes at its own sizes.
   On the GPU each op is checked in its own worker process (``--jobs``), which
   then also runs the op's timing cases once, so that the kernel compilations
   (the slow part) run in parallel and land in Triton's on-disk cache. The
   autotune configs of that warm-up are split over ``--warm-slices`` workers
   per op (worker i compiles configs i, i + n, ...): a compiled kernel's cache
   key does not depend on which other configs its autotuner holds, so the
   timing pass's full autotuning then finds every config compiled. Without the
   split, an op's configs compile one after another in one process (the cold
   cost that made a part overrun a 10-minute slot);
3. speed (serial, in the main process): each kernel at a Qwen3.5-like size against the peer a user would
   pick there (torch SDPA for attention, flash-linear-attention's kernels for
   the delta rule when fla is importable there, else a skip with its reason;
   the chunked delta rule in bfloat16 at the Qwen3.5 GDN shape), as
   median times of ``triton.testing.do_bench``, with the achieved bandwidth
   or FLOP rate as a share of the measured ceilings. Timing stops when
   ``--budget-s`` is spent; correctness always runs.

The tables are printed last; ``--json`` writes every number. Exit status 1 if
any correctness check or kernel launch failed.

``--cpu`` is a dry run of the same code under the Triton interpreter with tiny
shapes and one-shot host timings (no bf16: its ``tl.dot`` is wrong there);
``tests/triton/test_device_check.py`` runs it, so the script's logic is
tested without a GPU.
"""
from __future__ import annotations

import argparse
import importlib.util
import itertools
import json
import math
import os
import signal
import sys
import time
import traceback
from dataclasses import dataclass, field
from typing import Callable

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ALL_OPS = ("reshape_and_cache", "paged_decode_attention", "prefill_attention", "mixed_attention",
           "chunk_gated_delta_rule", "fused_recurrent_gated_delta_rule", "causal_conv1d_fn",
           "causal_conv1d_update", "fused_gdn_gating")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--cpu", action="store_true", help="dry run under the Triton interpreter, tiny shapes")
    p.add_argument("--ops", default=",".join(ALL_OPS), help="comma-separated subset of: " + ", ".join(ALL_OPS))
    p.add_argument("--budget-s", type=float, default=210.0, help="stop timing after this many seconds")
    p.add_argument("--no-timing", action="store_true", help="correctness only")
    p.add_argument("--no-correctness", action="store_true", help="timing only (e.g. a second run)")
    p.add_argument("--json", default=None, help="write all results to this file")
    p.add_argument("--jobs", type=int, default=None,
                   help="worker processes for the correctness pass and the compilation warm-up "
                        "(default: --warm-slices per op, at most the CPU count, on the GPU; 1 under --cpu)")
    p.add_argument("--warm-slices", type=int, default=4,
                   help="warm-up workers per op on the GPU, each compiling every n-th autotune config (default 4)")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--config-slice", default=None, help=argparse.SUPPRESS)  # "i/n": this worker's configs
    args = p.parse_args(argv)
    if args.warm_slices < 1:
        p.error(f"--warm-slices must be at least 1, got {args.warm_slices}")
    args.ops = [o for o in args.ops.split(",") if o]
    unknown = sorted(set(args.ops) - set(ALL_OPS))
    if unknown:
        p.error(f"unknown ops {unknown}; choose from {ALL_OPS}")
    return args


def import_qwen_ops():
    """``qwen_ops`` from this checkout, installed or not.

    The repository keeps ``ops/`` beside ``qwen_ops/`` and setup.py installs
    it as ``qwen_ops.ops``; without an install, a package whose search path
    is ``[qwen_ops/, repo root]`` resolves ``qwen_ops.ops`` the same way (the
    C++ extension is optional and absent there).
    """
    try:
        import qwen_ops.ops  # noqa: F401 - an install (editable or not)
        return sys.modules["qwen_ops"]
    except ImportError:
        for name in [m for m in sys.modules if m == "qwen_ops" or m.startswith("qwen_ops.")]:
            del sys.modules[name]
    spec = importlib.util.spec_from_file_location(
        "qwen_ops", os.path.join(REPO, "qwen_ops", "__init__.py"),
        submodule_search_locations=[os.path.join(REPO, "qwen_ops"), REPO])
    module = importlib.util.module_from_spec(spec)
    sys.modules["qwen_ops"] = module
    spec.loader.exec_module(module)
    return module


# ----------------------------------------------------------------------------- results


@dataclass
class Check:
    op: str
    case: str
    dtype: str
    ok: bool
    max_abs: float = float("nan")
    rel: float = float("nan")
    note: str = ""


@dataclass
class Timing:
    op: str
    case: str
    ms: float | None
    peer: str = "-"
    peer_ms: float | None = None
    bytes: float = 0.0
    flops: float = 0.0
    note: str = ""


@dataclass
class Report:
    checks: list = field(default_factory=list)
    timings: list = field(default_factory=list)
    ceilings: dict = field(default_factory=dict)
    env: dict = field(default_factory=dict)

    @property
    def failed(self) -> bool:
        return any(not c.ok for c in self.checks) or any(t.ms is None and t.note.startswith("FAIL")
                                                         for t in self.timings)


# ----------------------------------------------------------------------------- context


class Ctx:
    """Device, random inputs, timing and the shapes of this mode (tiny under --cpu)."""

    def __init__(self, torch, triton, cpu: bool, seed: int = 20251129):
        import qwen_ops.testing as testing  # after import_qwen_ops(): this checkout's, installed or not

        self.torch, self.triton, self.cpu = torch, triton, cpu
        self.device = torch.device("cpu" if cpu else "cuda")
        self.gen = torch.Generator(device=self.device).manual_seed(seed)
        # Every input is drawn by the case registry the tests and benchmarks use.
        self.testing, self.draw = testing, testing.Draw(self.gen)
        self.check_dtypes = ([] if cpu else [torch.bfloat16]) + [torch.float16, torch.float32]
        self.bench_dtype = torch.float16 if cpu else torch.bfloat16

    def randn(self, *shape, dtype=None, scale=1.0):
        return self.draw.randn(*shape, dtype=dtype, scale=scale)

    def sync(self):
        if not self.cpu:
            self.torch.cuda.synchronize()

    def time_ms(self, fn: Callable[[], object]) -> float:
        """Median milliseconds of ``fn`` (device events); one host-timed call under --cpu."""
        if self.cpu:
            t0 = time.perf_counter()
            fn()
            return (time.perf_counter() - t0) * 1e3
        fn()  # compile / autotune outside the timing
        self.sync()
        return float(self.triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median"))


def dtype_name(dtype) -> str:
    return str(dtype).replace("torch.", "")


def compare(ctx, tolerances, op, case, dtype, outs, refs) -> Check:
    """Every kernel output / mutated state against the reference's, within KERNEL_VS_REFERENCE[dtype]."""
    torch = ctx.torch
    atol, rtol = tolerances.KERNEL_VS_REFERENCE[dtype]
    max_abs, num, den, note = 0.0, 0.0, 0.0, ""
    ok = True
    for i, (o, r) in enumerate(zip(outs, refs)):
        if o is None or r is None:
            if (o is None) != (r is None):
                ok, note = False, f"output {i}: one backend returned None"
            continue
        if o.shape != r.shape or o.dtype != r.dtype:
            ok, note = False, f"output {i}: {tuple(o.shape)} {o.dtype} vs reference {tuple(r.shape)} {r.dtype}"
            continue
        o64, r64 = o.detach().double(), r.detach().double()
        if not bool(torch.isfinite(o64).all()):
            ok, note = False, f"output {i} has non-finite values"
            continue
        diff = (o64 - r64).abs()
        max_abs = max(max_abs, float(diff.max()) if diff.numel() else 0.0)
        num += float((diff ** 2).sum())
        den += float((r64 ** 2).sum())
        bad = diff > atol + rtol * r64.abs()
        if bool(bad.any()):
            ok = False
            note = note or f"output {i}: {int(bad.sum())} of {bad.numel()} elements outside atol={atol}, rtol={rtol}"
    rel = math.sqrt(num / den) if den > 0 else 0.0
    return Check(op, case, dtype_name(dtype), ok, max_abs, rel, note)


# ----------------------------------------------------------------------------- input builders


def offsets(ctx, lengths):
    return ctx.testing.offsets(lengths, ctx.device)


def dense_kv(ctx, cache, tables, length, scale):
    """[N, Hkv, L, D] copy of the first ``length`` tokens of every request (for the SDPA peer)."""
    torch = ctx.torch
    nb, hkv, bs, d = cache.shape
    blocks = cache[tables[:, : -(-length // bs)].long()]  # [N, b, Hkv, Bs, D]
    x = blocks.permute(0, 2, 1, 3, 4).reshape(tables.shape[0], hkv, -1, d)[:, :, :length]
    return x.to(torch.float32) * scale[None, :, None, :] if cache.dtype == torch.int8 else x


# ----------------------------------------------------------------------------- the ops
# Each ``case_*`` returns (run, cost): ``run(backend)`` calls the op on fresh
# copies of any state it mutates and returns [outputs..., mutated states...];
# ``cost`` is (bytes, flops) of one call. ``peers_*`` return {name: fn}.


def case_cache(ctx, ops, dtype, cache_dtype, t, hkv, d, bs):
    call = ctx.testing.cache_write_call(ctx.draw, tokens=t, hkv=hkv, head_dim=d, block_size=bs,
                                        num_blocks=-(-2 * t // bs), dtype=dtype, cache_dtype=cache_dtype,
                                        padding=slice(None, None, 7), scale_range=(0.01, 0.06))
    key, value, slots = call["key"], call["value"], call["slot_mapping"]
    kc0, vc0, scales = call["key_cache"], call["value_cache"], (call["k_scale"], call["v_scale"])

    def run(backend, fresh=True):
        kc, vc = (kc0.clone(), vc0.clone()) if fresh else (kc0, vc0)
        ops.reshape_and_cache(key, value, kc, vc, slots, *scales, backend=backend)
        return [kc, vc]

    return run, (t * hkv * d * 2 * (key.element_size() + kc0.element_size()) + 4 * t, 0.0)


def case_decode(ctx, ops, dtype, cache_dtype, lengths, hq, hkv, d, bs):
    call = ctx.testing.decode_call(ctx.draw, dtype, cache_dtype, hq, hkv, d, bs, lengths)
    query, kc, vc, tables, seq_lens, ks, vs = (call[name] for name in ("query", "key_cache", "value_cache",
                                                                          "block_tables", "seq_lens", "k_scale",
                                                                          "v_scale"))

    def run(backend, fresh=True):
        return [ops.paged_decode_attention(query, kc, vc, tables, seq_lens, k_scale=ks, v_scale=vs,
                                           backend=backend)]

    tokens = sum(lengths)
    bytes_ = 2 * tokens * hkv * d * kc.element_size() + 2 * query.numel() * query.element_size()
    return run, (bytes_, 4.0 * tokens * hq * d), (query, kc, vc, tables, ks, vs)


def peers_decode(ctx, ops, state, length):
    """torch SDPA over the requests' K/V gathered densely beforehand (the gather is not timed)."""
    torch = ctx.torch
    query, kc, vc, tables, ks, vs = state
    k = dense_kv(ctx, kc, tables, length, ks).to(query.dtype)
    v = dense_kv(ctx, vc, tables, length, vs).to(query.dtype)
    q = query[:, :, None, :]  # [N, Hq, 1, D]
    sdpa = torch.nn.functional.scaled_dot_product_attention
    return {"torch SDPA, dense KV": lambda: sdpa(q, k, v, enable_gqa=True)}


def case_prefill(ctx, ops, dtype, cache_dtype, q_lens, context_lens, hq, hkv, d, bs, causal=True):
    kwargs = ctx.testing.prefill_call(ctx.draw, dtype, cache_dtype, hq, hkv, d, bs, q_lens, context_lens)
    query, key, value, cu = (kwargs.pop(name) for name in ("query", "key", "value", "cu_seqlens_q"))
    ctx_tokens = sum(context_lens or [])

    def run(backend, fresh=True):
        return [ops.prefill_attention(query, key, value, cu, causal=causal, backend=backend, **kwargs)]

    pairs = sum(q * (c + (q + 1) / 2 if causal else c + q) for q, c in zip(q_lens, context_lens or [0] * len(q_lens)))
    bytes_ = (2 * query.numel() + 2 * key.numel()) * query.element_size() + 2 * ctx_tokens * hkv * d * (
        kwargs["key_cache"].element_size() if kwargs else 0)
    return run, (bytes_, 4.0 * pairs * hq * d), (query, key, value)


def peers_prefill(ctx, state, n, length):
    """torch SDPA, causal, on the equal-length batch viewed as [N, H, L, D]."""
    torch = ctx.torch
    query, key, value = state
    q, k, v = (x.view(n, length, x.shape[1], x.shape[2]).transpose(1, 2) for x in (query, key, value))
    sdpa = torch.nn.functional.scaled_dot_product_attention
    return {"torch SDPA (causal)": lambda: sdpa(q, k, v, is_causal=True, enable_gqa=True)}


def case_mixed(ctx, ops, dtype, cache_dtype, q_lens, seq_lens, num_decodes, hq, hkv, d, bs):
    torch = ctx.torch
    call = ctx.testing.mixed_call(ctx.draw, dtype, cache_dtype, hq, hkv, d, bs, q_lens, seq_lens, num_decodes)
    query, key, value, kc, vc, tables, qsl, sl, ks, vs = (call[name] for name in (
        "query", "key", "value", "key_cache", "value_cache", "block_tables", "query_start_loc", "seq_lens", "k_scale",
        "v_scale"))
    cached = [s if r < num_decodes else s - q for r, (q, s) in enumerate(zip(q_lens, seq_lens))]

    def run(backend, fresh=True):
        return [ops.mixed_attention(query, key, value, kc, vc, tables, qsl, sl, num_decodes, k_scale=ks, v_scale=vs,
                                    backend=backend)]

    def two_calls():
        nd = num_decodes
        dec = ops.paged_decode_attention(query[:nd], kc, vc, tables[:nd], sl[:nd], k_scale=ks, v_scale=vs,
                                         backend="triton")
        pre = ops.prefill_attention(query[nd:], key[nd:], value[nd:], qsl[nd:] - qsl[nd], key_cache=kc,
                                    value_cache=vc, block_tables=tables[nd:], context_lens=sl[nd:] - (qsl[nd + 1:] - qsl[nd:-1]),
                                    k_scale=ks, v_scale=vs, backend="triton")
        return torch.cat([dec, pre])

    pairs = sum(1 * s if r < num_decodes else q * (s - q + (q + 1) / 2)
                for r, (q, s) in enumerate(zip(q_lens, seq_lens)))
    bytes_ = 2 * sum(cached) * hkv * d * kc.element_size() + (2 * query.numel() + 2 * key.numel()) * query.element_size()
    return run, (bytes_, 4.0 * pairs * hq * d), {"triton decode + prefill (2 calls)": two_calls}


def case_gdn(ctx, ops, name, dtype, lengths, hk, hv, dk, dv, pool: bool):
    """The delta rule over packed sequences; ``pool``: states from a pool with a padding row (-1)."""
    torch, testing = ctx.torch, ctx.testing
    fn = getattr(ops, name)
    t, n = sum(lengths), len(lengths)
    # Log-decays around logsigmoid(0): fast and slow ones; q and k normalised in the kernel.
    q, k, v, g, beta = testing.gdn_inputs(ctx.draw, batch=1, tokens=t, hk=hk, hv=hv, dk=dk, dv=dv, dtype=dtype,
                                          l2norm_in_kernel=True, decay_center=0.0)
    cu = offsets(ctx, lengths)
    if pool:
        state0 = testing.state_pool(ctx.draw, 2 * n + 1, hv, dk, dv, scale=0.1)
        idx = testing.pool_indices(ctx.draw, n, 2 * n + 1, padding=n // 2)
        has = torch.ones(n, dtype=torch.bool, device=ctx.device)
        has[0] = False
        extra = dict(ssm_state_indices=idx, has_initial_state=has)
    else:
        state0 = testing.state_pool(ctx.draw, n, hv, dk, dv, scale=0.1)
        extra = {}

    def run(backend, fresh=True):
        state = state0.clone() if fresh else state0
        o, final = fn(q, k, v, g, beta, initial_state=state, output_final_state=True, cu_seqlens=cu,
                      use_qk_l2norm_in_kernel=True, backend=backend, **extra)
        return [o, final] + ([state] if pool else [])

    bytes_ = ((q.numel() + k.numel() + 2 * v.numel() + beta.numel()) * q.element_size() + 4 * g.numel()
              + 2 * 4 * n * hv * dk * dv * (2 if pool else 1))
    flops = chunk_flops(lengths, hv, dk, dv) if name == "chunk_gated_delta_rule" else 0.0
    return run, (bytes_, flops), (q, k, v, g, beta, cu, state0)


def chunk_flops(lengths, hv, dk, dv, chunk=64) -> float:
    """The matrix products of the chunked delta rule (ops/gdn/triton_chunk.py, and fla's), per value head and chunk
    of L tokens: K K^T and Q K^T (4 L^2 Dk), w and u (2 L^2 Dk + 2 L^2 Dv), and per chunk step w S, q S, k^T v_new
    (6 L Dk Dv) and Aqk v_new (2 L^2 Dv). The small float32 inverse is not counted."""
    total = 0.0
    for length in lengths:
        for start in range(0, length, chunk):
            l_ = min(chunk, length - start)
            total += 6 * l_ * l_ * dk + 4 * l_ * l_ * dv + 6 * l_ * dk * dv
    return total * hv


def peers_gdn(name, state, lengths):
    """flash-linear-attention's kernel of the same name, if fla is importable (its wheel was carried).

    Without fla the peer is a skip with its reason (a string): the torch reference is no kernel a user would
    pick on a GPU. fla 0.6 takes Hv > Hk itself (GVA); an fla that does not is given q and k repeated per value
    head (same math, more memory read), the next peer tried.
    """
    q, k, v, g, beta, cu, state0 = state
    hk, hv = q.shape[2], v.shape[2]
    try:
        from fla.ops import gated_delta_rule as fla_gdn
    except Exception as exc:  # noqa: BLE001 - any import failure means: no fla peer
        return {f"fla {name}": f"fla not importable: {type(exc).__name__}: {str(exc)[:80]}"}
    fla_fn = getattr(fla_gdn, name)
    n = len(lengths)
    init = state0[:n].contiguous() if state0.shape[0] != n else state0

    def call(qq, kk):
        return lambda: fla_fn(qq, kk, v, g, beta, initial_state=init, output_final_state=True,
                              cu_seqlens=cu.long(), use_qk_l2norm_in_kernel=True)

    return {f"fla {name}": call(q, k),
            f"fla {name} (q, k repeated)": call(*(x.repeat_interleave(hv // hk, dim=2) for x in (q, k)))}


def case_conv_fn(ctx, ops, dtype, lengths, c, width):
    torch, testing = ctx.torch, ctx.testing
    t, n = sum(lengths), len(lengths)
    call = testing.conv_fn_call(ctx.draw, lengths, c, width, dtype, pool_rows=2 * n, weight_scale=0.5,
                                cache_indices=testing.pool_indices(ctx.draw, n, 2 * n, padding=-1),
                                has_initial_state=torch.arange(n, device=ctx.device) % 2 == 0)
    x, weight, bias, states0 = call["x"], call["weight"], call["bias"], call["conv_states"]
    qsl, idx, has = call["query_start_loc"], call["cache_indices"], call["has_initial_state"]

    def run(backend, fresh=True):
        states = states0.clone() if fresh else states0
        out = ops.causal_conv1d_fn(x, weight, bias, conv_states=states, query_start_loc=qsl, cache_indices=idx,
                                   has_initial_state=has, activation="silu", backend=backend)
        return [out, states]

    return run, ((2 * x.numel() + 2 * n * (width - 1) * c) * x.element_size(), 2.0 * t * c * width)


def case_conv_update(ctx, ops, dtype, batch, c, width):
    testing = ctx.testing
    call = testing.conv_update_call(ctx.draw, c, width, dtype, pool_rows=2 * batch, weight_scale=0.5,
                                    cache_indices=testing.pool_indices(ctx.draw, batch, 2 * batch, padding=0))
    x, weight, bias, states0, idx = (call[name] for name in ("x", "weight", "bias", "conv_states", "cache_indices"))

    def run(backend, fresh=True):
        states = states0.clone() if fresh else states0
        out = ops.causal_conv1d_update(x, states, weight, bias, cache_indices=idx, activation="silu", backend=backend)
        return [out, states]

    return run, ((2 * x.numel() + 2 * batch * (width - 1) * c) * x.element_size(), 2.0 * batch * c * width)


def case_gating(ctx, ops, dtype, t, hv):
    call = ctx.testing.gating_inputs(ctx.draw, t, hv, dtype, a_scale=3.0, b_scale=3.0)

    def run(backend, fresh=True):
        return list(ops.fused_gdn_gating(**call, backend=backend))

    return run, (t * hv * (3 * call["a"].element_size() + 4), 0.0)


# ----------------------------------------------------------------------------- shapes

# Realistic sizes are Qwen3.5's layers (qwen_ops.testing.SHAPES["qwen3.5"]: attention 16 query / 4 KV
# heads of 256; gated delta rule 16 key / 32 value heads of 128; conv 8192 channels, width 4), the
# benchmarks' too; --cpu runs tiny ones.


def correctness_cases(ctx, ops, op):
    """(case name, dtype, run) triples of ``op`` for the correctness pass."""
    torch, tiny = ctx.torch, ctx.cpu
    i8 = torch.int8
    qwen = ctx.testing.SHAPES["qwen3.5"]
    attn = dict(hq=4, hkv=2, d=64) if tiny else qwen.attention
    gdn = dict(hk=1, hv=2, dk=32, dv=32) if tiny else dict(hk=4, hv=8, dk=128, dv=128)  # fewer heads: quick
    channels = 32 if tiny else qwen.conv_channels
    dec_few = [37, 5] if tiny else [3000, 1, 0, 700]          # few requests: split-KV path
    dec_many = [9, 0, 16] if tiny else [(r * 37) % 200 for r in range(300)]  # many: no split on an H200
    out = []
    for dt in ctx.check_dtypes:
        if op == "reshape_and_cache":
            out.append((f"T={11 if tiny else 500}", dt, case_cache(ctx, ops, dt, dt, 11 if tiny else 500, 2, 64 if tiny else 256, 16)[0]))
            out.append(("int8 cache", dt, case_cache(ctx, ops, dt, i8, 11 if tiny else 500, 2, 64 if tiny else 256, 16)[0]))
        elif op == "paged_decode_attention":
            out.append(("few long (split-KV)", dt, case_decode(ctx, ops, dt, dt, dec_few, bs=16 if tiny else 64, **attn)[0]))
            out.append(("many short", dt, case_decode(ctx, ops, dt, dt, dec_many, bs=16, **attn)[0]))
            out.append(("int8 cache, split-KV", dt, case_decode(ctx, ops, dt, i8, dec_few, bs=16 if tiny else 128, **attn)[0]))
        elif op == "prefill_attention":
            ql, cl = ([20, 0, 5], [7, 0, 18]) if tiny else ([300, 0, 77, 1], [0, 0, 500, 64])
            out.append(("no context", dt, case_prefill(ctx, ops, dt, None, ql, None, bs=16, **attn)[0]))
            out.append(("paged context", dt, case_prefill(ctx, ops, dt, dt, ql, cl, bs=16 if tiny else 64, **attn)[0]))
            out.append(("int8 context, non-causal", dt, case_prefill(ctx, ops, dt, i8, ql, cl, bs=16, causal=False, **attn)[0]))
        elif op == "mixed_attention":
            ql, sl = ([1, 1, 12, 0, 5], [30, 1, 27, 9, 5]) if tiny else ([1] * 6 + [200, 0, 50], [900, 1, 64, 0, 300, 2000, 700, 9, 50])
            nd = 2 if tiny else 6
            out.append(("decodes + prefills", dt, case_mixed(ctx, ops, dt, dt, ql, sl, nd, bs=16 if tiny else 64, **attn)[0]))
            out.append(("int8 cache", dt, case_mixed(ctx, ops, dt, i8, ql, sl, nd, bs=16, **attn)[0]))
        elif op in ("chunk_gated_delta_rule", "fused_recurrent_gated_delta_rule"):
            lengths = ([70, 1, 30] if tiny else [300, 1, 64, 130]) if op.startswith("chunk") else (
                [9, 1, 3] if tiny else [40, 1, 7])
            out.append(("packed, initial state", dt, case_gdn(ctx, ops, op, dt, lengths, pool=False, **gdn)[0]))
            out.append(("state pool, padding", dt, case_gdn(ctx, ops, op, dt, lengths, pool=True, **gdn)[0]))
            if op.startswith("fused"):
                decode = [1] * (5 if tiny else 64)
                out.append(("decode step, pool", dt, case_gdn(ctx, ops, op, dt, decode, pool=True, **gdn)[0]))
        elif op == "causal_conv1d_fn":
            lengths = [9, 2, 0, 5] if tiny else [300, 2, 0, 1000, 3]
            out.append((f"{len(lengths)} seqs", dt, case_conv_fn(ctx, ops, dt, lengths, channels, 4)[0]))
        elif op == "causal_conv1d_update":
            out.append(("batch", dt, case_conv_update(ctx, ops, dt, 5 if tiny else 256, channels, 4)[0]))
        elif op == "fused_gdn_gating":
            out.append(("T tokens", dt, case_gating(ctx, ops, dt, 7 if tiny else 4096, 4 if tiny else 32)[0]))
    if not tiny:
        # On the GPU every case in bf16 (it can only be checked there) and the
        # first case in the other dtypes: each case and dtype is one more
        # kernel compilation, and float32/float16 are covered by the CPU tests.
        firsts = {dt: next(i for i, c in enumerate(out) if c[1] == dt) for dt in ctx.check_dtypes}
        out = [c for i, c in enumerate(out) if c[1] == torch.bfloat16 or i == firsts[c[1]]]
    return out


def timing_cases(ctx, ops, op):
    """(case name, run, cost, peers) of ``op`` at the benchmark size (tiny under --cpu)."""
    torch, tiny, dt = ctx.torch, ctx.cpu, ctx.bench_dtype
    qwen = ctx.testing.SHAPES["qwen3.5"]
    attn = dict(hq=4, hkv=2, d=64) if tiny else qwen.attention
    gdn = dict(hk=1, hv=2, dk=32, dv=32) if tiny else qwen.gdn
    channels = 32 if tiny else qwen.conv_channels
    out = []
    if op == "reshape_and_cache":
        t = 16 if tiny else 65536
        for cache_dtype in (dt, torch.int8):
            run, cost = case_cache(ctx, ops, dt, cache_dtype, t, attn["hkv"], attn["d"], 16 if tiny else 64)
            out.append((f"T={t} -> {dtype_name(cache_dtype)} cache", run, cost,
                        {"torch reference (index_put)": lambda run=run: run("torch", fresh=False)}))
    elif op == "paged_decode_attention":
        for n, length in ([(2, 40)] if tiny else [(64, 8192), (2, 65536)]):
            for cache_dtype in (dt, torch.int8):
                run, cost, state = case_decode(ctx, ops, dt, cache_dtype, [length] * n, bs=16 if tiny else 64, **attn)
                out.append((f"N={n} L={length} {dtype_name(cache_dtype)} cache", run, cost,
                            peers_decode(ctx, ops, state, length)))
    elif op == "prefill_attention":
        n, length = (2, 24) if tiny else (4, 4096)
        run, cost, state = case_prefill(ctx, ops, dt, None, [length] * n, None, bs=16, **attn)
        out.append((f"N={n} L={length} causal", run, cost, peers_prefill(ctx, state, n, length)))
        q_len, c_len = (8, 20) if tiny else (1024, 8192)
        run, cost, _ = case_prefill(ctx, ops, dt, dt, [q_len] * n, [c_len] * n, bs=16 if tiny else 64, **attn)
        out.append((f"N={n} new={q_len} context={c_len}", run, cost, {}))
    elif op == "mixed_attention":
        nd, length, q_len, c_len = (2, 30, 8, 10) if tiny else (64, 4096, 1024, 2048)
        q_lens, seq_lens = [1] * nd + [q_len] * 2, [length] * nd + [c_len + q_len] * 2
        run, cost, peers = case_mixed(ctx, ops, dt, dt, q_lens, seq_lens, nd, bs=16 if tiny else 64, **attn)
        out.append((f"{nd} decodes L={length} + 2 prefills {q_len}+{c_len}", run, cost, peers))
    elif op in ("chunk_gated_delta_rule", "fused_recurrent_gated_delta_rule"):
        if op.startswith("chunk"):
            lengths = [70, 30] if tiny else [4096] * 4
            run, cost, state = case_gdn(ctx, ops, op, dt, lengths, pool=False, **gdn)
            out.append((f"{len(lengths)} x {lengths[0]} tokens", run, cost, peers_gdn(op, state, lengths)))
        else:
            lengths = [1] * (4 if tiny else 256)
            run, cost, state = case_gdn(ctx, ops, op, dt, lengths, pool=True, **gdn)
            out.append((f"decode step, {len(lengths)} seqs (pool)", run, cost, peers_gdn(op, state, lengths)))
    elif op == "causal_conv1d_fn":
        lengths = [9, 5] if tiny else [4096] * 4
        run, cost = case_conv_fn(ctx, ops, dt, lengths, channels, 4)
        out.append((f"{len(lengths)} x {lengths[0]} tokens", run, cost, {"torch reference": lambda: run("torch", False)}))
    elif op == "causal_conv1d_update":
        batch = 4 if tiny else 256
        run, cost = case_conv_update(ctx, ops, dt, batch, channels, 4)
        out.append((f"batch {batch}", run, cost, {"torch reference": lambda: run("torch", False)}))
    elif op == "fused_gdn_gating":
        t = 8 if tiny else 65536
        run, cost = case_gating(ctx, ops, dt, t, 4 if tiny else 32)
        out.append((f"T={t}", run, cost, {"torch reference": lambda: run("torch", False)}))
    return out


# ----------------------------------------------------------------------------- passes


def measure_ceilings(ctx, report):
    """Copy bandwidth (read + write bytes) and bf16 (fp32 on --cpu) matmul rate on random data."""
    torch = ctx.torch
    n_copy = (1 << 16) if ctx.cpu else (1 << 30)  # elements of float32: 4 GiB on the GPU
    src = ctx.randn(n_copy)
    dst = torch.empty_like(src)
    ms = ctx.time_ms(lambda: dst.copy_(src))
    report.ceilings["copy_GBps"] = 2 * src.numel() * 4 / (ms * 1e-3) / 1e9
    del src, dst
    m = 128 if ctx.cpu else 8192
    dtype = torch.float32 if ctx.cpu else torch.bfloat16
    a, b = ctx.randn(m, m, dtype=dtype), ctx.randn(m, m, dtype=dtype)
    ms = ctx.time_ms(lambda: a @ b)
    report.ceilings["matmul_TFLOPs"] = 2 * m ** 3 / (ms * 1e-3) / 1e12
    report.ceilings["matmul_dtype"] = dtype_name(dtype)


def configured_kernels(op_names):
    """Every ``ConfiguredKernel`` of the Triton implementations of ``op_names`` (importing them)."""
    import importlib

    from qwen_ops.ops import _backend
    from qwen_ops.ops._triton import ConfiguredKernel

    found = []
    for op in op_names:
        module_name = _backend.IMPLEMENTATIONS[op]["triton"].split(":")[0]
        try:
            module = importlib.import_module(f"qwen_ops.ops.{module_name}")
        except Exception:  # noqa: BLE001 - the correctness pass reports a module that does not import
            continue
        found += [k for k in vars(module).values() if isinstance(k, ConfiguredKernel) and k not in found]
    return found


def set_autotuning(kernels, full: bool, config_slice: tuple[int, int] = (0, 1)):
    """Full CUDA autotuning (timing pass) or the first config only (correctness pass, one compile each).

    ``config_slice`` (i, n) keeps configs i, i + n, ... of the full list (a
    warm-up worker's share; the first config where the share is empty).
    Rebuilding the autotuner also forgets configs tuned at other sizes, so
    the timing pass tunes at the sizes it times.
    """
    i, n = config_slice
    for k in kernels:
        if not hasattr(k, "all_cuda_configs"):
            k.all_cuda_configs = list(k.cuda_configs)
        k.cuda_configs = (k.all_cuda_configs[i::n] or k.all_cuda_configs[:1]) if full else k.all_cuda_configs[:1]
        k.__dict__.pop("_autotuned", None)  # functools.cached_property: rebuilt on next launch


def correctness_pass(ctx, ops, tolerances, report, op_names):
    for op in op_names:
        t0 = time.time()
        try:
            cases = correctness_cases(ctx, ops, op)
        except Exception as exc:  # noqa: BLE001 - building inputs must not stop the other ops
            report.checks.append(Check(op, "inputs", "-", False, note=f"FAIL building inputs: {exc!r}"))
            continue
        for case, dtype, run in cases:
            try:
                refs = run("torch")
                outs = run("triton")
                ctx.sync()
                report.checks.append(compare(ctx, tolerances, op, case, dtype, outs, refs))
            except Exception as exc:  # noqa: BLE001 - report and go on
                report.checks.append(Check(op, case, dtype_name(dtype), False,
                                           note=f"{type(exc).__name__}: {str(exc).splitlines()[0][:160] if str(exc) else ''}"))
                traceback.print_exc()
        print(f"[{time.strftime('%H:%M:%S')}] checked {op} in {time.time() - t0:.1f} s", flush=True)


def timing_pass(ctx, ops, report, op_names, deadline):
    for op in op_names:
        if time.time() > deadline:
            report.timings.append(Timing(op, "-", None, note="skipped: time budget spent"))
            continue
        try:
            cases = timing_cases(ctx, ops, op)
        except Exception as exc:  # noqa: BLE001
            report.timings.append(Timing(op, "inputs", None, note=f"FAIL building inputs: {exc!r}"[:200]))
            continue
        for case, run, (bytes_, flops), peers in cases:
            if time.time() > deadline:
                report.timings.append(Timing(op, case, None, note="skipped: time budget spent"))
                continue
            row = Timing(op, case, None, bytes=bytes_, flops=flops)
            try:
                row.ms = ctx.time_ms(lambda: run("triton", False))
            except Exception as exc:  # noqa: BLE001
                row.note = f"FAIL: {type(exc).__name__}: {str(exc)[:160]}"
                report.timings.append(row)
                continue
            for name, fn in peers.items():
                if isinstance(fn, str):  # a peer that cannot run here: skipped, with its reason
                    row.note = f"peer {name} skipped: {fn}"
                    continue
                try:
                    row.peer, row.peer_ms = name, ctx.time_ms(fn)
                    break  # the first peer that runs is the one users would pick
                except Exception as exc:  # noqa: BLE001 - a missing or failing peer is a note, not a failure
                    row.note = f"peer {name}: {type(exc).__name__}"
            report.timings.append(row)
        print(f"[{time.strftime('%H:%M:%S')}] timed {op}", flush=True)
        del cases
        if not ctx.cpu:
            ctx.torch.cuda.empty_cache()


def warm_up(ctx, ops, op_names):
    """Run each timing case and peer once, so that their kernels (and autotuning) are compiled.

    Done by the worker processes in parallel: compiled kernels land in
    Triton's on-disk cache, and the serial timing pass then only benchmarks.
    """
    for op in op_names:
        try:
            for _case, run, _cost, peers in timing_cases(ctx, ops, op):
                run("triton", False)
                for fn in peers.values():
                    if isinstance(fn, str):  # a skipped peer (its reason)
                        continue
                    try:
                        fn()
                        break
                    except Exception:  # noqa: BLE001 - the timing pass reports peers
                        pass
                ctx.sync()
        except Exception:  # noqa: BLE001 - the timing pass reports it
            traceback.print_exc()


def parallel_checks(args, report):
    """Correctness (and the compilation warm-up) of each op in its own worker process."""
    import subprocess
    import tempfile

    base = [sys.executable, os.path.abspath(__file__), "--worker"] + (["--cpu"] if args.cpu else []) + (
        ["--no-timing"] if args.no_timing else [])
    # Per op: slice 0 checks correctness and warms its share of the configs; slices 1.. only warm theirs.
    slices = 1 if args.no_timing or args.cpu else args.warm_slices
    pending = [(op, i) for op in args.ops for i in range(slices)]
    running = {}
    with tempfile.TemporaryDirectory() as tmp:
        try:
            while pending or running:
                while pending and len(running) < args.jobs:
                    op, i = pending.pop(0)
                    name = op if slices == 1 else f"{op} (configs {i}/{slices})"
                    out = os.path.join(tmp, f"{op}.{i}.json")
                    log = open(os.path.join(tmp, f"{op}.{i}.log"), "w+")
                    share = ["--config-slice", f"{i}/{slices}"] + (["--no-correctness"] if i else [])
                    proc = subprocess.Popen(base + ["--ops", op, "--json", out] + share, stdout=log,
                                            stderr=subprocess.STDOUT)
                    running[name] = (proc, out, log, time.time())
                for op, (proc, out, log, t0) in list(running.items()):
                    if proc.poll() is None:
                        continue
                    del running[op]
                    log.seek(0)
                    text = log.read()
                    log.close()
                    try:
                        with open(out) as f:
                            report.checks += [Check(**c) for c in json.load(f)["checks"]]
                    except (OSError, ValueError, KeyError):
                        report.checks.append(Check(op, "worker", "-", False,
                                                   note=f"FAIL: worker exited {proc.returncode} without results"))
                    if proc.returncode != 0 or "Traceback" in text:
                        print(f"--- worker {op} (exit {proc.returncode}), last lines:\n" + text[-3000:], flush=True)
                    print(f"[{time.strftime('%H:%M:%S')}] worker {op} done in {time.time() - t0:.1f} s", flush=True)
                time.sleep(0.2)
        finally:
            for proc, _out, log, _t0 in running.values():  # stopped early (timeout): leave nothing behind
                proc.kill()
                log.close()


def run_worker(args, ctx, ops, tolerances) -> int:
    report = Report()
    kernels = configured_kernels(args.ops)
    if not args.no_correctness:
        set_autotuning(kernels, full=False)
        correctness_pass(ctx, ops, tolerances, report, args.ops)
    if not args.no_timing and not ctx.cpu:
        i, n = (int(x) for x in (args.config_slice or "0/1").split("/"))
        set_autotuning(kernels, full=True, config_slice=(i, n))
        warm_up(ctx, ops, args.ops)
    with open(args.json, "w") as f:
        json.dump({"checks": [vars(c) for c in report.checks]}, f, default=str)
    return 0


# ----------------------------------------------------------------------------- output


def fmt(x, spec=".3g", none="-"):
    return none if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, spec)


def print_tables(report):
    c = report.ceilings
    print("\n== ceilings (measured here)")
    print(f"device-to-device copy: {fmt(c.get('copy_GBps'), '.0f')} GB/s (read + write); "
          f"{c.get('matmul_dtype', '?')} matmul: {fmt(c.get('matmul_TFLOPs'), '.1f')} TFLOP/s")
    print("\n== correctness: triton vs torch reference (KERNEL_VS_REFERENCE)")
    head = f"{'op':34} {'case':28} {'dtype':9} {'result':6} {'max|err|':>9} {'rel err':>9}  note"
    print(head)
    print("-" * len(head))
    for k in report.checks:
        print(f"{k.op:34} {k.case[:28]:28} {k.dtype:9} {'ok' if k.ok else 'FAIL':6} {fmt(k.max_abs, '.2e'):>9} "
              f"{fmt(k.rel, '.2e'):>9}  {k.note}")
    print("\n== speed: median ms (lower is better); rate = achieved / measured ceiling")
    head = (f"{'op':34} {'case':40} {'triton ms':>10} {'peer':34} {'peer ms':>9} {'speedup':>8} "
            f"{'GB/s':>7} {'%copy':>6} {'TFLOP/s':>8} {'%mm':>5}  note")
    print(head)
    print("-" * len(head))
    for t in report.timings:
        gbps = t.bytes / (t.ms * 1e-3) / 1e9 if t.ms else None
        tflops = t.flops / (t.ms * 1e-3) / 1e12 if t.ms and t.flops else None
        pct_bw = 100 * gbps / c["copy_GBps"] if gbps and c.get("copy_GBps") else None
        pct_mm = 100 * tflops / c["matmul_TFLOPs"] if tflops and c.get("matmul_TFLOPs") else None
        speedup = t.peer_ms / t.ms if t.ms and t.peer_ms else None
        print(f"{t.op:34} {t.case[:40]:40} {fmt(t.ms, '.4f'):>10} {t.peer[:34]:34} {fmt(t.peer_ms, '.4f'):>9} "
              f"{fmt(speedup, '.2f'):>8} {fmt(gbps, '.0f'):>7} {fmt(pct_bw, '.0f'):>6} {fmt(tflops, '.1f'):>8} "
              f"{fmt(pct_mm, '.0f'):>5}  {t.note}")
    n_bad = sum(not k.ok for k in report.checks)
    print(f"\n== {len(report.checks) - n_bad} of {len(report.checks)} correctness checks passed"
          + ("" if not report.failed else "; FAILURES above"))


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.cpu:
        # Before triton or any kernel module is imported: kernels are interpreted.
        os.environ["TRITON_INTERPRET"] = "1"
    import torch
    import triton

    if not args.cpu and not torch.cuda.is_available():
        print("device_check: no CUDA device visible to torch; use --cpu for the interpreter dry run", file=sys.stderr)
        return 2
    sys.path.insert(0, os.path.join(REPO, "tests"))
    import tolerances

    qwen_ops = import_qwen_ops()
    ops = qwen_ops.ops
    ctx = Ctx(torch, triton, args.cpu)
    if args.worker:
        return run_worker(args, ctx, ops, tolerances)
    if args.jobs is None:
        args.jobs = 1 if args.cpu else max(1, min(len(args.ops) * args.warm_slices, os.cpu_count() or 1))
    # A timeout's SIGTERM must unwind (and stop the workers), not just kill this process.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(124))
    report = Report()
    report.env = {"torch": torch.__version__, "triton": triton.__version__, "mode": "cpu-interpreter" if args.cpu else "cuda",
                  "device": "cpu" if args.cpu else torch.cuda.get_device_name(0),
                  "fla": importlib.util.find_spec("fla") is not None}
    if not args.cpu:
        props = torch.cuda.get_device_properties(0)
        report.env["sms"] = props.multi_processor_count
    print("== environment: " + ", ".join(f"{k}={v}" for k, v in report.env.items()), flush=True)
    start = time.time()
    kernels = configured_kernels(args.ops)
    measure_ceilings(ctx, report)
    if not args.no_correctness:
        if args.jobs > 1:
            parallel_checks(args, report)
        else:
            set_autotuning(kernels, full=False)
            correctness_pass(ctx, ops, tolerances, report, args.ops)
    if not args.no_timing:
        set_autotuning(kernels, full=True)
        timing_pass(ctx, ops, report, args.ops, start + args.budget_s)
    report.env["wall_s"] = round(time.time() - start, 1)
    print_tables(report)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"env": report.env, "ceilings": report.ceilings,
                       "checks": [vars(c) for c in report.checks], "timings": [vars(t) for t in report.timings]},
                      f, indent=1, default=str)
    return 1 if report.failed else 0


if __name__ == "__main__":
    sys.exit(main())
