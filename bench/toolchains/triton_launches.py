"""Every Triton kernel launch the ops make at the Qwen3.5 shapes, per target: what the compiler checks compile.

The launches are not listed by hand. Each scenario below calls a public op
(``backend="triton"``) on small CPU tensors that have the Qwen3.5 head counts,
head dims and channel counts (only token and sequence counts are small) inside
``qwen_ops.ops._triton.recorded_launches(target)``: the op's own host code
runs, taking its ``target == "npu"`` / ``"cuda"`` branches, and every
``ConfiguredKernel`` launch it makes is recorded with its real arguments,
its constexprs and the configs the target would use (the fixed one on Ascend,
every autotune config on CUDA). A check compiles these with the target's
compiler, binding the recorded arguments with Triton's own binder, so a check
cannot drift from what the ops launch. ``kernels_defined()`` lists every
``ConfiguredKernel`` of the ops' Triton modules, and the enumeration fails if
one of them is never launched.

Shapes (``qwen_ops.testing.SHAPES``): attention 16 query / 4 KV heads and
8 / 2 of 256 (paged blocks of 128 and 16); GDN 16 key / 32 value heads and
16 / 16 of 128, chunks of 64; the GDN conv over 8192 and 6144 channels; the
MoE experts of Qwen3.5-35B-A3B (hidden 2048, 256 experts of width 512, top-8).
Dtypes bfloat16 and float16. Launches that differ in nothing a compiler sees
(signature, constexprs, configs) are kept once, with every scenario that made them.

Run under the Triton of the check (not under ``TRITON_INTERPRET=1``: the kernel
modules are imported first, so the recorded kernels are compilable
``JITFunction`` objects). ``python triton_launches.py [cuda|npu]`` prints the list.
"""
from __future__ import annotations

import importlib
import sys
from dataclasses import dataclass, field

import torch

from qwen_ops import ops, testing
from qwen_ops.ops import _backend, _triton
from qwen_ops.ops.gdn.decode_step.op import gdn_decode_step

SHAPE_NAMES = ("qwen3.5", "qwen3.5-0.8b")
DTYPES = (torch.bfloat16, torch.float16)
# Qwen3.5-35B-A3B's routed experts (tests/triton/test_moe_triton.py, bench/kernels/test_moe_bench.py).
MOE_SHAPE = dict(hidden=2048, intermediate=512, experts=256, top_k=8)
# An INT8 projection of Qwen3.5-0.8B's shape: hidden 1024 in, its MLP's 3584 out.
INT8_LINEAR_SHAPE = dict(hidden=1024, out=3584)
# Programs of a persistent grid: an H200 has 132 SMs (the split-KV choice of decode depends on it);
# Ascend as in _triton.ASCEND_FALLBACK_VECTOR_CORES (a 910B).
H200_SMS = 132
PROGRAMS = {"cuda": H200_SMS * _triton.CUDA_PROGRAMS_PER_SM, "npu": _triton.ASCEND_FALLBACK_VECTOR_CORES}
TARGETS = tuple(PROGRAMS)


def kernel_name(kernel: _triton.ConfiguredKernel) -> str:
    return getattr(kernel.kernel, "fn", kernel.kernel).__name__


def type_of(value) -> str:
    """A readable type of one launch argument (the check's compiler binds the real value itself)."""
    if isinstance(value, torch.Tensor):
        return "*" + str(value.dtype).replace("torch.", "")
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        # Triton specialises integer arguments equal to 1 and multiples of 16: they compile differently.
        kind = "i32" if -2 ** 31 <= value < 2 ** 31 else "i64"
        return kind + ("=1" if value == 1 else ":16" if value % 16 == 0 else "")
    if isinstance(value, float):
        return "fp32"
    return type(value).__name__


@dataclass
class Launch:
    """One distinct launch of a kernel on a target, as the ops' host code made it."""

    kernel: _triton.ConfiguredKernel
    target: str
    grid: tuple
    args: tuple
    kwargs: dict  # the constexprs the host passed
    configs: list  # the fixed config (npu) or every autotune config (cuda)
    scenarios: list = field(default_factory=list)

    @property
    def name(self) -> str:
        return kernel_name(self.kernel)

    @property
    def signature(self) -> str:
        return ", ".join(type_of(a) for a in self.args)

    @property
    def constexprs(self) -> dict:
        return dict(self.kwargs)

    def key(self) -> tuple:
        return (self.name, self.signature, repr(sorted(self.kwargs.items())), repr(self.configs))

    def describe(self, config_index: int | None = None) -> str:
        consts = " ".join(f"{k}={v}" for k, v in self.kwargs.items())
        text = f"{self.name} [{consts}]"
        if config_index is not None:
            text += " config " + " ".join(f"{k}={v}" for k, v in self.configs[config_index].items())
        return text


# ----------------------------------------------------------------------------- scenarios
# Each takes (draw, shapes: LayerShapes, dtype) and calls ops with backend="triton".


def _cache_write(draw, s, dtype):
    for cache_dtype in (dtype, torch.int8):
        call = testing.cache_write_call(draw, tokens=6, hkv=s.hkv, head_dim=s.head_dim, block_size=s.block_size,
                                        num_blocks=2, dtype=dtype, cache_dtype=cache_dtype, padding=slice(None, None, 4))
        ops.reshape_and_cache(**call, backend="triton")
        yield "float cache" if cache_dtype == dtype else "int8 cache"


def _decode(draw, s, dtype):
    # Short sequences: one split (direct output); a long one: split-KV plus the merge kernel.
    for lengths, what in (([5, 200], "one split"), ([3000, 40], "split-KV")):
        for cache_dtype in (dtype, torch.int8):
            call = testing.decode_call(draw, dtype, cache_dtype, s.hq, s.hkv, s.head_dim, s.block_size, lengths)
            ops.paged_decode_attention(**call, backend="triton")
            yield f"{what}, {'float' if cache_dtype == dtype else 'int8'} cache"


def _prefill(draw, s, dtype):
    q_lens = [5, 40]
    for causal in (True, False):
        call = testing.prefill_call(draw, dtype, dtype, s.hq, s.hkv, s.head_dim, s.block_size, q_lens)
        ops.prefill_attention(**call, causal=causal, backend="triton")
        yield f"no context, {'causal' if causal else 'non-causal'}"
    for cache_dtype in (dtype, torch.int8):
        call = testing.prefill_call(draw, dtype, cache_dtype, s.hq, s.hkv, s.head_dim, s.block_size, q_lens,
                                    context_lens=[100, 7])
        ops.prefill_attention(**call, backend="triton")
        yield f"paged context, {'float' if cache_dtype == dtype else 'int8'} cache"


def _mixed(draw, s, dtype):
    for cache_dtype in (dtype, torch.int8):
        call = testing.mixed_call(draw, dtype, cache_dtype, s.hq, s.hkv, s.head_dim, s.block_size,
                                  q_lens=[1, 1, 9, 30], seq_lens=[50, 7, 29, 30], num_decodes=2)
        ops.mixed_attention(**call, backend="triton")
        yield f"2 decodes + 2 prefills, {'float' if cache_dtype == dtype else 'int8'} cache"


def _gdn_inputs(draw, s, dtype, lengths, l2norm):
    q, k, v, g, beta = testing.gdn_inputs(draw, batch=1, tokens=sum(lengths), hk=s.hk, hv=s.hv, dk=s.dk, dv=s.dv,
                                          dtype=dtype, l2norm_in_kernel=l2norm)
    return q, k, v, g, beta, testing.offsets(lengths)


def _pool(draw, s, n):
    rows = 2 * n + 1
    idx = testing.pool_indices(draw, n, rows, padding=n // 2)
    has = torch.ones(n, dtype=torch.bool)
    has[0] = False
    return testing.state_pool(draw, rows, s.hv, s.dk, s.dv), idx, has


def _gdn_chunk(draw, s, dtype):
    # The model's prefill: a state pool with a padding row, q/k normalised in the kernel.
    q, k, v, g, beta, cu = _gdn_inputs(draw, s, dtype, [70, 30, 64], l2norm=True)
    pool, idx, has = _pool(draw, s, 3)
    ops.chunk_gated_delta_rule(q, k, v, g, beta, initial_state=pool, cu_seqlens=cu, ssm_state_indices=idx,
                               has_initial_state=has, use_qk_l2norm_in_kernel=True, backend="triton")
    yield "state pool, l2norm in kernel"
    q, k, v, g, beta, cu = _gdn_inputs(draw, s, dtype, [70, 30], l2norm=False)
    ops.chunk_gated_delta_rule(q, k, v, g, beta, output_final_state=True, cu_seqlens=cu, backend="triton")
    yield "fresh states, final states out"
    # "chunk" prefix caching: the states at chunk ends 64 of the first sequence also emitted.
    q, k, v, g, beta, cu = _gdn_inputs(draw, s, dtype, [70, 64, 30], l2norm=True)
    pool, idx, has = _pool(draw, s, 3)
    ops.chunk_gated_delta_rule(q, k, v, g, beta, initial_state=pool, cu_seqlens=cu, ssm_state_indices=idx,
                               has_initial_state=has, use_qk_l2norm_in_kernel=True, backend="triton",
                               checkpoint_boundaries=torch.tensor([[0, 1], [1, 1]], dtype=torch.int32))
    yield "state pool, chunk-boundary checkpoints out"


def _gdn_recurrent(draw, s, dtype):
    q, k, v, g, beta, cu = _gdn_inputs(draw, s, dtype, [1, 1, 1], l2norm=True)
    pool, idx, has = _pool(draw, s, 3)
    ops.fused_recurrent_gated_delta_rule(q, k, v, g, beta, initial_state=pool, cu_seqlens=cu,
                                         ssm_state_indices=idx, has_initial_state=has,
                                         use_qk_l2norm_in_kernel=True, backend="triton")
    yield "decode step, state pool"
    q, k, v, g, beta, cu = _gdn_inputs(draw, s, dtype, [3, 2], l2norm=True)
    table = torch.arange(6, dtype=torch.int32).view(2, 3)
    ops.fused_recurrent_gated_delta_rule(q, k, v, g, beta, initial_state=testing.state_pool(draw, 6, s.hv, s.dk, s.dv),
                                         cu_seqlens=cu, ssm_state_indices=table,
                                         num_accepted_tokens=torch.tensor([1, 2], dtype=torch.int32),
                                         use_qk_l2norm_in_kernel=True, backend="triton")
    yield "speculative decoding (a state row per token)"
    q, k, v, g, beta, cu = _gdn_inputs(draw, s, dtype, [4, 2], l2norm=False)
    ops.fused_recurrent_gated_delta_rule(q, k, v, g, beta, output_final_state=True, cu_seqlens=cu, backend="triton")
    yield "fresh states, final states out"


def _gating(draw, s, dtype):
    ops.fused_gdn_gating(**testing.gating_inputs(draw, 10, s.hv, dtype), backend="triton")
    yield "gates"


def _conv_fn(draw, s, dtype):
    c, width = s.conv_channels, s.conv_width
    for bias, activation in ((False, "silu"), (True, None)):
        call = testing.conv_fn_call(draw, [9, 40], c, width, dtype, pool_rows=4, cache_indices=[2, 0],
                                    has_initial_state=[True, False], bias=bias)
        ops.causal_conv1d_fn(**call, activation=activation, backend="triton")
        yield f"{'bias' if bias else 'no bias'}, {activation or 'no activation'}"


def _conv_update(draw, s, dtype):
    c, width = s.conv_channels, s.conv_width
    for bias, activation in ((False, "silu"), (True, None)):
        call = testing.conv_update_call(draw, c, width, dtype, pool_rows=4, cache_indices=[3, -1, 0], bias=bias)
        ops.causal_conv1d_update(**call, activation=activation, backend="triton")
        yield f"decode step, {'bias' if bias else 'no bias'}, {activation or 'no activation'}"
    call = testing.conv_update_call(draw, c, width, dtype, pool_rows=6, cache_indices=[0], bias=False)
    x = draw.randn(5, c, dtype=dtype)
    ops.causal_conv1d_update(x, call["conv_states"], call["weight"], cache_indices=torch.arange(6, dtype=torch.int32)
                             .view(2, 3), query_start_loc=testing.offsets([3, 2]),
                             num_accepted_tokens=torch.tensor([1, 2], dtype=torch.int32), activation="silu",
                             backend="triton")
    yield "speculative decoding"


def _decode_step(draw, s, _dtype):
    # float32 only (the op's contract), so both dtype passes make the same launches (kept once).
    call = testing.decode_step_call(draw, tokens=3, hk=s.hk, hv=s.hv, dk=s.dk, dv=s.dv, width=s.conv_width,
                                    pool_rows=6, state_indices=torch.tensor([4, -1, 0], dtype=torch.int32))
    gdn_decode_step(**call, backend="triton")
    yield "decode step, state pools with a padding row"
    call = testing.decode_step_call(draw, tokens=5, hk=s.hk, hv=s.hv, dk=s.dk, dv=s.dv, width=s.conv_width,
                                    pool_rows=6, state_indices=torch.arange(6, dtype=torch.int32).view(2, 3))
    gdn_decode_step(**call, query_start_loc=testing.offsets([3, 2]),
                        num_accepted_tokens=torch.tensor([1, 2], dtype=torch.int32), backend="triton")
    yield "speculative decoding (a pool row per token)"


def _moe(draw, _s, dtype):
    h, inter, e, top_k = (MOE_SHAPE[k] for k in ("hidden", "intermediate", "experts", "top_k"))
    tokens = 5
    # The weights are never read on the host: torch.empty leaves the 1.5 GiB untouched (no resident pages).
    w13 = torch.empty(e, 2 * inter, h, dtype=dtype)
    w2 = torch.empty(e, h, inter, dtype=dtype)
    ids = torch.stack([draw.randperm(e)[:top_k] for _ in range(tokens)]).to(torch.int32)
    weights = draw.uniform(tokens, top_k, low=0.0, high=1.0)
    ops.fused_experts(draw.randn(tokens, h, dtype=dtype), w13, w2, weights, ids, backend="triton")
    yield "35B-A3B experts, 5 tokens"


def _int8_linear(draw, _s, dtype):
    m, k, n = 5, INT8_LINEAR_SHAPE["hidden"], INT8_LINEAR_SHAPE["out"]
    # Never read on the host: the int8 weight stays untouched memory.
    weight, scale = torch.empty(n, k, dtype=torch.int8), torch.ones(n)
    x = draw.randn(m, k, dtype=dtype)
    q, token_scale = ops.quantize_per_token(x)
    ops.int8_linear(q, weight, scale, x_scale=token_scale, out_dtype=dtype, backend="triton")
    yield "W8A8_DYNAMIC (per-token scales)"
    ops.int8_linear(q, weight, scale, x_scale=torch.ones(m), quant_bias=torch.zeros(n, dtype=torch.int32),
                    out_dtype=dtype, backend="triton")
    yield "W8A8 (static, quant_bias)"
    ops.int8_linear(x, weight, scale, backend="triton")
    yield "weight-only"


# op -> (scenario, shape names it runs at): the MoE shape does not come from SHAPES.
SCENARIOS = {
    "reshape_and_cache": (_cache_write, SHAPE_NAMES),
    "paged_decode_attention": (_decode, SHAPE_NAMES),
    "prefill_attention": (_prefill, SHAPE_NAMES),
    "mixed_attention": (_mixed, SHAPE_NAMES),
    "chunk_gated_delta_rule": (_gdn_chunk, SHAPE_NAMES),
    "fused_recurrent_gated_delta_rule": (_gdn_recurrent, SHAPE_NAMES),
    "fused_gdn_gating": (_gating, SHAPE_NAMES),
    "causal_conv1d_fn": (_conv_fn, SHAPE_NAMES),
    "causal_conv1d_update": (_conv_update, SHAPE_NAMES),
    "gdn_decode_step": (_decode_step, SHAPE_NAMES),
    "fused_experts": (_moe, ("qwen3.5-35b-a3b",)),
    "int8_linear": (_int8_linear, ("qwen3.5-0.8b",)),
}


def triton_modules():
    """The ops' Triton implementation modules, imported (before any recording: see module doc)."""
    names = sorted({_backend.IMPLEMENTATIONS[op]["triton"].split(":")[0] for op in SCENARIOS})
    return [importlib.import_module(f"qwen_ops.ops.{name}") for name in names]


def kernels_defined() -> list:
    """Every ``ConfiguredKernel`` the ops' Triton modules define, in module order."""
    found = []
    for module in triton_modules():
        found += [k for k in vars(module).values() if isinstance(k, _triton.ConfiguredKernel) and k not in found]
    return found


def enumerate_launches(target: str, ops_subset=None) -> list[Launch]:
    """The distinct launches the ops make on ``target`` ("cuda" or "npu") over every scenario, shape and dtype.

    Raises RuntimeError naming any kernel of ``kernels_defined()`` that no
    scenario launched (when all ops are enumerated).
    """
    if target not in PROGRAMS:
        raise ValueError(f"enumerate_launches: argument 'target' must be one of {TARGETS}, got {target!r}")
    defined = kernels_defined()
    chosen = list(SCENARIOS) if ops_subset is None else list(ops_subset)
    by_key: dict[tuple, Launch] = {}
    for op in chosen:
        scenario, shape_names = SCENARIOS[op]
        for shape_name in shape_names:
            shapes = testing.SHAPES.get(shape_name)
            for dtype in DTYPES:
                draw = testing.Draw(torch.Generator().manual_seed(20251203))
                with _triton.recorded_launches(target, PROGRAMS[target]) as recorded:
                    labels = []
                    for label in scenario(draw, shapes, dtype):
                        labels.append((label, len(recorded)))
                start = 0
                for label, end in labels:
                    for rec in recorded[start:end]:
                        launch = Launch(rec.kernel, target, rec.grid, rec.args, rec.kwargs, rec.configs)
                        where = f"{op} {shape_name} {str(dtype).replace('torch.', '')}: {label}"
                        by_key.setdefault(launch.key(), launch).scenarios.append(where)
                    start = end
    launches = list(by_key.values())
    if ops_subset is None:
        launched = {id(launch.kernel) for launch in launches}
        missing = [kernel_name(k) for k in defined if id(k) not in launched]
        if missing:
            raise RuntimeError(f"enumerate_launches: no scenario launches {missing}; add one to SCENARIOS")
    return launches


def only_kernels(launches, names: str) -> list:
    """The launches of the comma-separated kernel ``names`` ("" keeps all).

    A name that no launch has raises ValueError, so a stale name cannot pass unnoticed.
    """
    known = {launch.name for launch in launches}
    wanted = set(names.split(",")) if names else set(known)
    unknown = wanted - known
    if unknown:
        raise ValueError(f"--kernels: no launch of {sorted(unknown)}; the kernels are {sorted(known)}")
    return [launch for launch in launches if launch.name in wanted]


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    for target in argv or TARGETS:
        launches = enumerate_launches(target)
        kernels = {launch.name for launch in launches}
        print(f"== {target}: {len(launches)} launch variants of {len(kernels)} kernels, "
              f"{sum(len(launch.configs) for launch in launches)} (variant, config) pairs")
        for launch in launches:
            print(f"{launch.describe()}  configs={len(launch.configs)}  ({launch.scenarios[0]}"
                  + (f" and {len(launch.scenarios) - 1} more)" if len(launch.scenarios) > 1 else ")"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
