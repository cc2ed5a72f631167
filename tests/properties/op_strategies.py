"""Hypothesis strategies of valid op calls, drawn within each op's documented ranges, and the reference backend.

A strategy draws a case's parameters (dtypes, heads, GQA ratio, head dims, block size, per-request
lengths including empty and one-token sequences, pools with holes, INT8 caches) and builds the call
with ``qwen_ops.testing`` from a drawn seed, so a failing example is printed as its parameters and
replays exactly. ``small=True`` draws for the Triton interpreter: small shapes (it runs each program
instance in Python), and no bfloat16 where the kernel multiplies with ``tl.dot`` (the interpreter's
bfloat16 ``tl.dot`` is wrong; ``tests/triton`` runs those on a GPU only).

Head dims are multiples of 16 (the Ascend C attention and chunk kernels need it, and every backend is
run on every case); cache writes take any head dim.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

import torch
from hypothesis import strategies as st

from qwen_ops import ops
from qwen_ops.ops._backend import IMPLEMENTATIONS, _can_serve
from qwen_ops.testing import (Draw, cache_write_call, conv_fn_call, conv_update_call, decode_call, gating_inputs,
                              gdn_inputs, mixed_call, offsets, pool_indices, prefill_call, state_pool)

F32, F16, BF16, I8, I32, I64 = torch.float32, torch.float16, torch.bfloat16, torch.int8, torch.int32, torch.int64
FLOATS = (F32, F16, BF16)
CPU = torch.device("cpu")

# op -> its torch reference ("module:function" under qwen_ops.ops), what every backend is compared against.
REFERENCES = {
    "reshape_and_cache": "cache.reference:reshape_and_cache",
    "paged_decode_attention": "attention.reference:paged_decode_attention",
    "prefill_attention": "attention.reference:prefill_attention",
    "mixed_attention": "attention.reference:mixed_attention",
    "chunk_gated_delta_rule": "gdn.reference_chunk:chunk_gated_delta_rule",
    "fused_recurrent_gated_delta_rule": "gdn.reference_recurrent:fused_recurrent_gated_delta_rule",
    "fused_gdn_gating": "gdn.reference_gating:fused_gdn_gating",
    "causal_conv1d_fn": "conv.reference:causal_conv1d_fn",
    "causal_conv1d_update": "conv.reference:causal_conv1d_update",
    "fused_experts": "moe.reference:fused_experts",
}


@contextlib.contextmanager
def reference_backend(op: str):
    """Within the block, ``backend="torch"`` runs ``op``'s reference (not its CPU fast form).

    The call still goes through the public op (its checks, default scale and argument normalisation),
    so reference and backends see exactly the same arguments.
    """
    table = IMPLEMENTATIONS[op]
    saved = table["torch"]
    table["torch"] = REFERENCES[op]
    try:
        yield
    finally:
        table["torch"] = saved


def backends_of(name: str) -> list[str]:
    """The backends that implement case ``name`` (an op, or op/form) and serve CPU tensors here (``torch`` is
    the CPU fast form)."""
    op = name.split("/")[0]
    return [b for b in ops.available_backends() if b in IMPLEMENTATIONS[op] and _can_serve(b, CPU) is None
            and not (name in SPEC_FORMS and b == "ascendc")]


@dataclass
class Case:
    """One valid call: ``fn(**call)``; ``written`` are the arguments it updates in place."""

    op: str
    call: dict
    written: tuple[str, ...] = ()
    dtype: torch.dtype = F32  # the dtype whose tolerance applies
    params: dict = field(default_factory=dict)

    def fresh(self) -> dict:
        """The call with every tensor copied, so each backend starts from the same caches and pools."""
        return {k: (v.clone() if isinstance(v, torch.Tensor) else v) for k, v in self.call.items()}

    def __repr__(self) -> str:  # what hypothesis prints for a failing example
        return f"Case({self.op}, {self.params})"


def _seed(draw) -> Draw:
    return Draw(seed=draw(st.integers(0, 2 ** 31 - 1)))


def _subset_index(draw, n: int, max_fraction_padded: float = 0.5) -> list[int]:
    """Positions of ``n`` to mark as padding (-1): often none, sometimes a few."""
    if n == 0 or not draw(st.booleans()):
        return []
    return sorted(draw(st.sets(st.integers(0, n - 1), max_size=max(1, int(n * max_fraction_padded)))))


# ----------------------------------------------------------------------------- cache and attention

@st.composite
def cache_cases(draw, small=False):
    dtype = draw(st.sampled_from(FLOATS))
    int8 = draw(st.booleans())
    hkv = draw(st.integers(1, 3))
    d = draw(st.sampled_from([8, 16, 40, 64]))
    bs = draw(st.sampled_from([1, 4, 16]))
    nb = draw(st.integers(1, 4 if small else 6))
    tokens = draw(st.integers(0, min(nb * bs, 6 if small else 12)))
    padding = _subset_index(draw, tokens)
    slot_dtype = draw(st.sampled_from([I32, I64]))
    params = dict(dtype=dtype, int8=int8, hkv=hkv, d=d, bs=bs, nb=nb, tokens=tokens, padding=padding,
                  slot_dtype=slot_dtype)
    call = cache_write_call(_seed(draw), tokens=tokens, hkv=hkv, head_dim=d, block_size=bs, num_blocks=nb,
                            dtype=dtype, cache_dtype=I8 if int8 else dtype, padding=padding or None,
                            slot_dtype=slot_dtype)
    return Case("reshape_and_cache", call, ("key_cache", "value_cache"), dtype, params)


def _dot_dtypes(small):
    """Float dtypes of a kernel that uses ``tl.dot``: no bfloat16 under the Triton interpreter (module doc)."""
    return (F32, F16) if small else FLOATS


def _attention_shape(draw, small):
    dtype = draw(st.sampled_from(_dot_dtypes(small)))
    cache_dtype = I8 if draw(st.booleans()) else dtype
    hkv = draw(st.integers(1, 1 if small else 2))
    group = draw(st.sampled_from([1, 2, 3, 4]))  # GQA: query heads per KV head
    d = draw(st.sampled_from([16, 32] if small else [16, 32, 64]))
    bs = draw(st.sampled_from([1, 4, 16]))
    spare = draw(st.integers(0, 3))  # blocks no request owns: holes in the pool
    return dict(dtype=dtype, cache_dtype=cache_dtype, hq=hkv * group, hkv=hkv, d=d, bs=bs, spare_blocks=spare)


def _length(draw, small, low=0):
    """A sequence length: often 0 or 1, else up to a few blocks."""
    return draw(st.one_of(st.integers(low, 1), st.integers(low, 6 if small else 40)))


@st.composite
def decode_cases(draw, small=False):
    shape = _attention_shape(draw, small)
    seq_lens = [_length(draw, small) for _ in range(draw(st.integers(1, 3 if small else 4)))]
    width = None
    if draw(st.booleans()):  # a wider table than needed (its extra columns are -1)
        width = max(-(-n // shape["bs"]) for n in seq_lens) + draw(st.integers(0, 3))
    params = dict(shape, seq_lens=seq_lens, width=width)
    call = decode_call(_seed(draw), shape["dtype"], shape["cache_dtype"], shape["hq"], shape["hkv"], shape["d"],
                       shape["bs"], seq_lens, width, spare_blocks=shape["spare_blocks"])
    return Case("paged_decode_attention", call, (), shape["dtype"], params)


@st.composite
def prefill_cases(draw, small=False):
    shape = _attention_shape(draw, small)
    n = draw(st.integers(1, 3))
    q_lens = [_length(draw, small) for _ in range(n)]
    context = [_length(draw, small) for _ in range(n)] if draw(st.booleans()) else None
    causal = draw(st.booleans())
    params = dict(shape, q_lens=q_lens, context_lens=context, causal=causal)
    call = prefill_call(_seed(draw), shape["dtype"], shape["cache_dtype"], shape["hq"], shape["hkv"], shape["d"],
                        shape["bs"], q_lens, context, spare_blocks=shape["spare_blocks"])
    call["causal"] = causal
    return Case("prefill_attention", call, (), shape["dtype"], params)


@st.composite
def mixed_cases(draw, small=False):
    shape = _attention_shape(draw, small)
    num_decodes = draw(st.integers(0, 3))
    num_prefills = draw(st.integers(0 if num_decodes else 1, 2))
    q_lens = [1] * num_decodes + [_length(draw, small) for _ in range(num_prefills)]
    # decodes: all seq_lens[r] tokens are in the cache (the new one included); prefills: context + chunk
    seq_lens = [_length(draw, small, low=1) for _ in range(num_decodes)] + \
        [q + _length(draw, small) for q in q_lens[num_decodes:]]
    params = dict(shape, q_lens=q_lens, seq_lens=seq_lens, num_decodes=num_decodes)
    call = mixed_call(_seed(draw), shape["dtype"], shape["cache_dtype"], shape["hq"], shape["hkv"], shape["d"],
                      shape["bs"], q_lens, seq_lens, num_decodes, spare_blocks=shape["spare_blocks"])
    return Case("mixed_attention", call, (), shape["dtype"], params)


# ----------------------------------------------------------------------------- Gated DeltaNet

@st.composite
def delta_rule_cases(draw, op, small=False):
    """Dense batches (B sequences of T tokens, optional initial states) or packed sequences over a state pool."""
    hk = draw(st.integers(1, 2))
    hv = hk * draw(st.sampled_from([1, 2]))
    dk, dv = draw(st.sampled_from([16, 32])), draw(st.sampled_from([16, 32]))
    l2norm = draw(st.booleans())
    output_final_state = draw(st.booleans())
    longest = 10 if small or op == "fused_recurrent_gated_delta_rule" else 70  # 70 crosses a 64-token chunk
    gen = _seed(draw)
    params = dict(hk=hk, hv=hv, dk=dk, dv=dv, l2norm=l2norm, output_final_state=output_final_state)
    extra = {}
    if draw(st.booleans()):  # packed sequences over a pool with holes and padding rows
        lengths = [draw(st.one_of(st.integers(0, 2), st.integers(0, longest))) for _ in range(draw(st.integers(1, 3)))]
        n, b, t = len(lengths), 1, sum(lengths)
        rows = n + draw(st.integers(0, 3))
        padding = _subset_index(draw, n)
        index_dtype = draw(st.sampled_from([I32, I64]))
        has_initial = [draw(st.booleans()) for _ in range(n)]
        params.update(lengths=lengths, rows=rows, padding=padding, has_initial=has_initial)
        extra = dict(initial_state=state_pool(gen, rows, hv, dk, dv),
                     cu_seqlens=offsets(lengths).to(index_dtype),
                     ssm_state_indices=pool_indices(gen, n, rows, padding=padding or None, dtype=index_dtype),
                     has_initial_state=torch.tensor(has_initial, dtype=torch.bool))
        written = ("initial_state",)
    else:
        b, t = draw(st.integers(1, 3)), draw(st.integers(0, 2 if small else 12))
        params.update(batch=b, tokens=t)
        if draw(st.booleans()):
            extra = dict(initial_state=state_pool(gen, b, hv, dk, dv))
        written = ()
    q, k, v, g, beta = gdn_inputs(gen, batch=b, tokens=t, hk=hk, hv=hv, dk=dk, dv=dv, l2norm_in_kernel=l2norm)
    call = dict(q=q, k=k, v=v, g=g, beta=beta, output_final_state=output_final_state,
                use_qk_l2norm_in_kernel=l2norm, **extra)
    return Case(op, call, written, F32, params)


@st.composite
def gating_cases(draw, small=False):
    dtype = draw(st.sampled_from(FLOATS))
    param_dtype = draw(st.sampled_from([F32, BF16]))
    tokens, heads = draw(st.integers(0, 8 if small else 24)), draw(st.integers(1, 8))
    a_scale = draw(st.sampled_from([1.0, 20.0]))  # 20: softplus on both sides of its threshold
    params = dict(dtype=dtype, param_dtype=param_dtype, tokens=tokens, heads=heads, a_scale=a_scale)
    call = gating_inputs(_seed(draw), tokens, heads, dtype, a_scale=a_scale, param_dtype=param_dtype)
    return Case("fused_gdn_gating", call, (), dtype, params)


# ----------------------------------------------------------------------------- conv

def _conv_common(draw, small):
    dtype = draw(st.sampled_from(FLOATS))
    return dict(dtype=dtype, pool_dtype=draw(st.sampled_from([dtype, F32])), width=draw(st.sampled_from([2, 3, 4])),
                channels=draw(st.integers(1, 24 if small else 70)), bias=draw(st.booleans()),
                activation=draw(st.sampled_from(["silu", None])), index_dtype=draw(st.sampled_from([I32, I64])))


def _indices_with_padding(draw, n, rows):
    ids = draw(st.permutations(range(rows)))[:n]
    return [-1 if i in _subset_index(draw, n) else r for i, r in enumerate(ids)]


@st.composite
def conv_fn_cases(draw, small=False):
    p = _conv_common(draw, small)
    lengths = [_length(draw, small) for _ in range(draw(st.integers(1, 3)))]
    n = len(lengths)
    rows = n + draw(st.integers(0, 3))
    indices = _indices_with_padding(draw, n, rows)
    has_initial = [draw(st.booleans()) for _ in range(n)]
    params = dict(p, lengths=lengths, rows=rows, indices=indices, has_initial=has_initial)
    call = conv_fn_call(_seed(draw), lengths, p["channels"], p["width"], p["dtype"], pool_rows=rows,
                        cache_indices=indices, has_initial_state=has_initial, pool_dtype=p["pool_dtype"],
                        bias=p["bias"], index_dtype=p["index_dtype"])
    call["activation"] = p["activation"]
    return Case("causal_conv1d_fn", call, ("conv_states",), p["dtype"], params)


@st.composite
def conv_update_cases(draw, small=False):
    p = _conv_common(draw, small)
    n = draw(st.integers(0, 4))
    rows = max(1, n + draw(st.integers(0, 3)))
    indices = _indices_with_padding(draw, n, rows)
    params = dict(p, rows=rows, indices=indices)
    call = conv_update_call(_seed(draw), p["channels"], p["width"], p["dtype"], pool_rows=rows, cache_indices=indices,
                            pool_dtype=p["pool_dtype"], bias=p["bias"], index_dtype=p["index_dtype"])
    call["activation"] = p["activation"]
    return Case("causal_conv1d_update", call, ("conv_states",), p["dtype"], params)


# ----------------------------------------------------------------------------- MoE experts

@st.composite
def experts_cases(draw, small=False):
    dtype = draw(st.sampled_from(_dot_dtypes(small)))
    tokens, hidden, inter = draw(st.integers(0, 6 if small else 12)), draw(st.sampled_from([8, 24])), \
        draw(st.sampled_from([4, 8]))
    experts = draw(st.integers(1, 5))
    top_k = draw(st.integers(1, experts))
    ids = [[draw(st.integers(0, experts - 1)) for _ in range(top_k)] for _ in range(tokens)]  # repeats allowed
    index_dtype = draw(st.sampled_from([I32, I64]))
    params = dict(dtype=dtype, tokens=tokens, hidden=hidden, inter=inter, experts=experts, ids=ids)
    gen = _seed(draw)
    w = gen.uniform(tokens, top_k, low=0.05, high=1.0)
    call = dict(hidden_states=gen.randn(tokens, hidden, dtype=dtype),
                w13=gen.randn(experts, 2 * inter, hidden, dtype=dtype, scale=hidden ** -0.5),
                w2=gen.randn(experts, hidden, inter, dtype=dtype, scale=inter ** -0.5),
                topk_weights=w / w.sum(-1, keepdim=True).clamp_min(1e-6),
                topk_ids=torch.tensor(ids, dtype=index_dtype).reshape(tokens, top_k))
    return Case("fused_experts", call, (), dtype, params)


# ----------------------------------------------------------------------------- speculative decoding

def _spec_rows(draw, gen):
    """The spec-decode state metadata: [N, W = 1 + k] distinct pool rows (a row of all -1 is padding),
    L_r tokens per request (1..W; 0 for padding) and num_accepted_tokens (1..W)."""
    n, width = draw(st.integers(1, 3)), 1 + draw(st.integers(1, 3))
    rows = n * width + draw(st.integers(0, 3))
    table = gen.randperm(rows, dtype=I32)[: n * width].view(n, width).clone()
    padded = _subset_index(draw, n)
    table[padded] = -1
    lengths = [0 if r in padded else draw(st.integers(1, width)) for r in range(n)]
    accepted = [1 if r in padded else draw(st.integers(1, width)) for r in range(n)]
    return dict(n=n, width=width, rows=rows, padded=padded, lengths=lengths, accepted=accepted), table


@st.composite
def spec_recurrent_cases(draw, small=False):
    """``fused_recurrent_gated_delta_rule`` with ``num_accepted_tokens``: a pool row per token of the step."""
    gen = _seed(draw)
    params, table = _spec_rows(draw, gen)
    hk = draw(st.integers(1, 2))
    hv, dk, dv = hk * draw(st.sampled_from([1, 2])), draw(st.sampled_from([16, 32])), draw(st.sampled_from([16, 32]))
    l2norm = draw(st.booleans())
    params.update(hk=hk, hv=hv, dk=dk, dv=dv, l2norm=l2norm)
    q, k, v, g, beta = gdn_inputs(gen, batch=1, tokens=sum(params["lengths"]), hk=hk, hv=hv, dk=dk, dv=dv,
                                  l2norm_in_kernel=l2norm)
    call = dict(q=q, k=k, v=v, g=g, beta=beta, initial_state=state_pool(gen, params["rows"], hv, dk, dv),
                output_final_state=True, cu_seqlens=offsets(params["lengths"]), ssm_state_indices=table,
                num_accepted_tokens=torch.tensor(params["accepted"], dtype=I32), use_qk_l2norm_in_kernel=l2norm)
    return Case("fused_recurrent_gated_delta_rule", call, ("initial_state",), F32, params)


@st.composite
def spec_conv_update_cases(draw, small=False):
    """``causal_conv1d_update`` with ``query_start_loc`` and ``num_accepted_tokens``: a state row per token."""
    gen = _seed(draw)
    params, table = _spec_rows(draw, gen)
    p = _conv_common(draw, small)
    params.update(p)
    call = conv_update_call(gen, p["channels"], p["width"], p["dtype"], pool_rows=params["rows"],
                            cache_indices=[0] * sum(params["lengths"]), pool_dtype=p["pool_dtype"], bias=p["bias"],
                            index_dtype=p["index_dtype"])
    call.update(cache_indices=table.to(p["index_dtype"]), activation=p["activation"],
                query_start_loc=offsets(params["lengths"]).to(p["index_dtype"]),
                num_accepted_tokens=torch.tensor(params["accepted"], dtype=p["index_dtype"]))
    return Case("causal_conv1d_update", call, ("conv_states",), p["dtype"], params)


# The speculative-decoding forms are not served by the ascendc backend (the ops' docstrings).
SPEC_FORMS = ("fused_recurrent_gated_delta_rule/spec", "causal_conv1d_update/spec")

# case name (an op, or op/form) -> (public function, strategy factory taking small=)
STRATEGIES = {
    "reshape_and_cache": (ops.reshape_and_cache, cache_cases),
    "paged_decode_attention": (ops.paged_decode_attention, decode_cases),
    "prefill_attention": (ops.prefill_attention, prefill_cases),
    "mixed_attention": (ops.mixed_attention, mixed_cases),
    "chunk_gated_delta_rule": (ops.chunk_gated_delta_rule,
                               lambda small=False: delta_rule_cases("chunk_gated_delta_rule", small)),
    "fused_recurrent_gated_delta_rule": (ops.fused_recurrent_gated_delta_rule,
                                         lambda small=False: delta_rule_cases("fused_recurrent_gated_delta_rule",
                                                                              small)),
    "fused_gdn_gating": (ops.fused_gdn_gating, gating_cases),
    "causal_conv1d_fn": (ops.causal_conv1d_fn, conv_fn_cases),
    "causal_conv1d_update": (ops.causal_conv1d_update, conv_update_cases),
    "fused_experts": (ops.fused_experts, experts_cases),
    "fused_recurrent_gated_delta_rule/spec": (ops.fused_recurrent_gated_delta_rule, spec_recurrent_cases),
    "causal_conv1d_update/spec": (ops.causal_conv1d_update, spec_conv_update_cases),
}
