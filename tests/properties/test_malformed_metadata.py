"""Property tests: random malformed metadata raises a clear error and leaves every input untouched.

Hypothesis draws a valid call of an op (``op_strategies``, INT8 caches and pools with holes
included), breaks one piece of its metadata at random -- a slot id past the cache or below -1, a
block id past the pool (or negative) where the table is read, a length past its table, a negative
length, offsets that decrease or do not span the tokens, a state or cache row past its pool or
repeated, an expert id past the experts, a wrong dtype, a wrong shape -- and calls the op on a
drawn backend. It must raise ``ValueError``/``TypeError`` whose message names the op and the
argument, and no tensor argument (caches and state pools above all) may have changed.

``tests/ops/test_bad_inputs.py`` breaks each argument in one fixed way; this draws the breakage,
its size and where it lands.
"""
from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from op_strategies import STRATEGIES, backends_of

from qwen_ops import ops

I16, I32, I64, U8, F16, F32, F64, BF16 = (torch.int16, torch.int32, torch.int64, torch.uint8, torch.float16,
                                         torch.float32, torch.float64, torch.bfloat16)

# Wrong dtypes by what an argument must be.
WRONG_DTYPES = {
    "int32": (I64, I16, F32),
    "index": (I16, U8, F32, torch.bool),  # int32 or int64 expected
    "bool": (I32, U8),
    "float32": (F16, BF16, F64),
}

# op -> {metadata argument: its dtype class}; the arguments that are absent in a given call are skipped.
METADATA = {
    "reshape_and_cache": {"slot_mapping": "index", "k_scale": "float32", "v_scale": "float32"},
    "paged_decode_attention": {"block_tables": "int32", "seq_lens": "int32", "k_scale": "float32",
                               "v_scale": "float32"},
    "prefill_attention": {"cu_seqlens_q": "int32", "block_tables": "int32", "context_lens": "int32",
                          "k_scale": "float32", "v_scale": "float32"},
    "mixed_attention": {"query_start_loc": "int32", "block_tables": "int32", "seq_lens": "int32",
                        "k_scale": "float32", "v_scale": "float32"},
    "chunk_gated_delta_rule": {"cu_seqlens": "index", "ssm_state_indices": "index", "has_initial_state": "bool",
                               "g": "float32", "initial_state": "float32"},
    "fused_recurrent_gated_delta_rule": {"cu_seqlens": "index", "ssm_state_indices": "index",
                                         "has_initial_state": "bool", "g": "float32", "initial_state": "float32"},
    "causal_conv1d_fn": {"query_start_loc": "index", "cache_indices": "index", "has_initial_state": "bool"},
    "causal_conv1d_update": {"cache_indices": "index"},
    "fused_experts": {"topk_ids": "index"},
    "fused_recurrent_gated_delta_rule/spec": {"cu_seqlens": "index", "ssm_state_indices": "index",
                                              "num_accepted_tokens": "index"},
    "causal_conv1d_update/spec": {"query_start_loc": "index", "cache_indices": "index",
                                  "num_accepted_tokens": "index"},
}

# Per-request metadata: one entry (or row) per request, so a missing or extra one is a shape error.
PER_REQUEST = {"seq_lens", "context_lens", "block_tables", "ssm_state_indices", "has_initial_state",
               "cache_indices", "slot_mapping", "topk_ids"}


class Broken:
    """A breakage: the call now fails on ``names`` (one of them must be named in the message)."""

    def __init__(self, what: str, *names: str):
        self.what, self.names = what, names

    def __repr__(self):
        return f"Broken({self.what!r})"


def _set(call, name, index, value):
    t = call[name].clone()
    t[index] = value
    call[name] = t


def _set_flat(call, name, position, value):
    """Set entry ``position`` of the tensor read in row-major order (1-D or 2-D index tables)."""
    t = call[name].clone()
    t.view(-1)[position] = value
    call[name] = t


def _offsets_breakage(draw, call, name):
    """Offsets [N+1] that decrease somewhere, start past 0 or end off the token count."""
    cu = call[name]
    n, total = cu.shape[0] - 1, int(cu[-1])
    kind = draw(st.sampled_from(["decrease", "start", "end"] if n >= 2 else ["start", "end"]))
    k = draw(st.integers(0, 5))
    if kind == "decrease":
        i = draw(st.integers(1, n - 1))
        _set(call, name, i, int(cu[i + 1]) + 1 + k)
    elif kind == "start":
        _set(call, name, 0, 1 + k)
    else:
        _set(call, name, -1, draw(st.sampled_from([total + 1 + k, total - 1 - k])) if total else total + 1 + k)
    return Broken(f"{name} {kind}", name)


def _used_blocks(call, lens):
    """(row, column) of block-table entries that the op reads: the first ceil(len / Bs) of each row."""
    bs = call["key_cache"].shape[2]
    return [(r, c) for r, n in enumerate(lens) for c in range(-(-max(0, n) // bs))]


def _context(op, call):
    """Tokens each request reads from the cache (what its block-table row must hold)."""
    if op == "paged_decode_attention":
        return call["seq_lens"].tolist()
    if op == "prefill_attention":
        return call["context_lens"].tolist()
    q = call["query_start_loc"]
    q_lens = (q[1:] - q[:-1]).tolist()
    d = call["num_decodes"]
    return [s if r < d else s - q_lens[r] for r, s in enumerate(call["seq_lens"].tolist())]


def _value_breakages(op, call):
    """The value breakages that apply to this call: name -> function(draw, call) -> Broken."""
    found = {}
    if op == "reshape_and_cache":
        slots = call["slot_mapping"]
        capacity = call["key_cache"].shape[0] * call["key_cache"].shape[2]
        if slots.numel():
            def slot_out_of_range(draw, call):
                value = draw(st.sampled_from([capacity + draw(st.integers(0, 100)), -2 - draw(st.integers(0, 100))]))
                _set(call, "slot_mapping", draw(st.integers(0, slots.numel() - 1)), value)
                return Broken("slot out of range", "slot_mapping")
            found["slot out of range"] = slot_out_of_range
        real = [i for i, s in enumerate(slots.tolist()) if s >= 0]
        if len(real) >= 2:
            def duplicate_slot(draw, call):
                i, j = draw(st.permutations(real))[:2]
                _set(call, "slot_mapping", j, int(slots[i]))
                return Broken("duplicate slot", "slot_mapping")
            found["duplicate slot"] = duplicate_slot
    if op in ("paged_decode_attention", "prefill_attention", "mixed_attention") and call.get("block_tables") is not None:
        lens_name = "context_lens" if op == "prefill_attention" else "seq_lens"
        nb = call["key_cache"].shape[0]
        used = _used_blocks(call, _context(op, call))
        if used:
            def block_out_of_pool(draw, call):
                value = draw(st.sampled_from([nb + draw(st.integers(0, 50)), -1 - draw(st.integers(0, 50))]))
                _set(call, "block_tables", draw(st.sampled_from(used)), value)
                return Broken("block id outside the pool", "block_tables")
            found["block id outside the pool"] = block_out_of_pool
        n = call[lens_name].shape[0]
        if n:
            capacity = call["block_tables"].shape[1] * call["key_cache"].shape[2]

            def length_past_table(draw, call):
                r = draw(st.integers(0, n - 1))
                _set(call, lens_name, r, int(call[lens_name][r]) + capacity + 1 + draw(st.integers(0, 20)))
                return Broken(f"{lens_name} past the table", lens_name)

            def negative_length(draw, call):
                _set(call, lens_name, draw(st.integers(0, n - 1)), -1 - draw(st.integers(0, 20)))
                return Broken(f"negative {lens_name}", lens_name)
            found[f"{lens_name} past the table"] = length_past_table
            found[f"negative {lens_name}"] = negative_length
        if op == "mixed_attention":
            q = call["query_start_loc"]
            prefills = [r for r in range(call["num_decodes"], n) if int(q[r + 1] - q[r]) >= 1]
            if prefills:
                def seq_len_below_chunk(draw, call):
                    r = draw(st.sampled_from(prefills))
                    _set(call, "seq_lens", r, draw(st.integers(0, int(q[r + 1] - q[r]) - 1)))
                    return Broken("seq_lens below the prefill chunk", "seq_lens")
                found["seq_lens below the chunk"] = seq_len_below_chunk

            def num_decodes_out_of_range(draw, call):
                call["num_decodes"] = draw(st.sampled_from([n + 1 + draw(st.integers(0, 3)), -1]))
                return Broken("num_decodes out of range", "num_decodes")
            found["num_decodes out of range"] = num_decodes_out_of_range
    for name in ("cu_seqlens_q", "query_start_loc", "cu_seqlens"):
        if call.get(name) is not None:
            found[f"{name} malformed"] = lambda draw, call, name=name: _offsets_breakage(draw, call, name)
    pools = {"ssm_state_indices": "initial_state", "cache_indices": "conv_states"}
    for name, pool in pools.items():
        if call.get(name) is None or call[name].numel() == 0:
            continue
        rows = call[pool].shape[0]

        def row_outside_pool(draw, call, name=name, rows=rows):
            value = draw(st.sampled_from([rows + draw(st.integers(0, 50)), -2 - draw(st.integers(0, 50))]))
            _set_flat(call, name, draw(st.integers(0, call[name].numel() - 1)), value)
            return Broken(f"{name} outside the pool", name)
        found[f"{name} outside the pool"] = row_outside_pool
        real = [i for i, r in enumerate(call[name].flatten().tolist()) if r >= 0]
        if len(real) >= 2:
            def repeated_row(draw, call, name=name, real=real):
                i, j = draw(st.permutations(real))[:2]
                _set_flat(call, name, j, int(call[name].flatten()[i]))
                return Broken(f"{name} repeated", name)
            found[f"{name} repeated"] = repeated_row
    if call.get("num_accepted_tokens") is not None:
        found.update(_spec_breakages(op, call))
    if op == "fused_experts" and call["topk_ids"].numel():
        experts = call["w13"].shape[0]

        def expert_out_of_range(draw, call):
            ids = call["topk_ids"]
            index = (draw(st.integers(0, ids.shape[0] - 1)), draw(st.integers(0, ids.shape[1] - 1)))
            _set(call, "topk_ids", index, draw(st.sampled_from([experts + draw(st.integers(0, 9)),
                                                                -1 - draw(st.integers(0, 9))])))
            return Broken("expert id out of range", "topk_ids")
        found["expert id out of range"] = expert_out_of_range
    for name in ("k_scale", "v_scale"):
        if call.get(name) is not None:
            def bad_scale(draw, call, name=name):
                s = call[name]
                index = (draw(st.integers(0, s.shape[0] - 1)), draw(st.integers(0, s.shape[1] - 1)))
                _set(call, name, index, draw(st.sampled_from([0.0, -0.01, float("inf"), float("nan")])))
                return Broken(f"{name} not finite and positive", name)
            found[f"{name} value"] = bad_scale
    return found


def _spec_breakages(op, call):
    """Speculative decoding: num_accepted_tokens outside [1, W], or -1 where a real row reads or writes a state."""
    rows_name = "ssm_state_indices" if op == "fused_recurrent_gated_delta_rule" else "cache_indices"
    table = call[rows_name]
    n, width = table.shape
    cu = call["cu_seqlens" if rows_name == "ssm_state_indices" else "query_start_loc"]
    lengths = (cu[1:] - cu[:-1]).tolist()
    accepted = call["num_accepted_tokens"].tolist()
    real = [r for r in range(n) if bool((table[r] >= 0).any())]

    def accepted_out_of_range(draw, call):
        value = draw(st.sampled_from([0, -1 - draw(st.integers(0, 5)), width + 1 + draw(st.integers(0, 5))]))
        _set(call, "num_accepted_tokens", draw(st.integers(0, n - 1)), value)
        return Broken("num_accepted_tokens out of range", "num_accepted_tokens")
    found = {"num_accepted_tokens out of range": accepted_out_of_range}
    if real:
        def unset_row_in_use(draw, call):
            r = draw(st.sampled_from(real))
            used = sorted(set(range(lengths[r])) | {accepted[r] - 1})
            _set(call, rows_name, (r, draw(st.sampled_from(used))), -1)
            return Broken(f"-1 in a used column of {rows_name}", rows_name)
        found["row in use unset"] = unset_row_in_use
    return found


def _type_and_shape_breakages(op, call):
    found = {}
    for name, kind in METADATA[op].items():
        if call.get(name) is None:
            continue

        def wrong_dtype(draw, call, name=name, kind=kind):
            call[name] = call[name].to(draw(st.sampled_from(WRONG_DTYPES[kind])))
            return Broken(f"{name} dtype", name)
        found[f"{name} dtype"] = wrong_dtype
        if name in PER_REQUEST:
            def wrong_shape(draw, call, name=name):
                t = call[name]
                kind = draw(st.sampled_from(["extra dim", "extra row"] + (["missing row"] if t.shape[0] else [])))
                if kind == "extra dim":
                    call[name] = t.unsqueeze(0)
                elif kind == "extra row":
                    call[name] = torch.cat([t, torch.zeros((1, *t.shape[1:]), dtype=t.dtype)])
                else:
                    call[name] = t[:-1]
                return Broken(f"{name} {kind}", name)
            found[f"{name} shape"] = wrong_shape
    return found


@st.composite
def malformed_calls(draw, name):
    """(valid case, its call broken once, the breakage, a backend): value breakages two times in three."""
    cases = STRATEGIES[name][1](small=True)
    if name in ("chunk_gated_delta_rule", "fused_recurrent_gated_delta_rule"):
        cases = cases.filter(lambda c: "cu_seqlens" in c.call)  # the packed form, over a state pool
    case = draw(cases)
    call = case.fresh()
    values, types = _value_breakages(case.op, call), _type_and_shape_breakages(name, call)
    breakages = values if values and draw(st.integers(0, 2)) else types
    broken = breakages[draw(st.sampled_from(sorted(breakages)))](draw, call)
    backend = draw(st.sampled_from(backends_of(name)))
    return case, call, broken, backend


def _snapshot(call):
    return {k: v.clone() for k, v in call.items() if isinstance(v, torch.Tensor)}


def _changed(call, before):
    return [k for k, old in before.items()
            if not (torch.equal(call[k].isnan(), old.isnan()) and torch.equal(call[k].nan_to_num(), old.nan_to_num()))]


@pytest.mark.parametrize("name", sorted(METADATA))
def test_malformed_metadata_raises_naming_op_and_argument_and_writes_nothing(name):
    @settings(max_examples=50, deadline=None, derandomize=True, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(malformed_calls(name))
    def run(drawn):
        check_rejected(*drawn)

    run()


def check_rejected(case, call, broken, backend):
    fn = getattr(ops, case.op)
    before = _snapshot(call)
    try:
        fn(**call, backend=backend)
    except (ValueError, TypeError) as error:
        message = str(error)
    else:
        raise AssertionError(f"{case.op} on {backend} accepted {broken}")
    assert message.startswith(f"{case.op}:"), message
    assert any(f"'{name}'" in message for name in broken.names), (broken, message)
    assert _changed(call, before) == [], f"{case.op} on {backend} wrote {_changed(call, before)} before failing"
