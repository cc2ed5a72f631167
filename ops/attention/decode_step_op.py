"""``attention_decode_step``: a full-attention layer's cache work for a step of decodes only, in one call.

Defined as its composition: ``reshape_and_cache`` of the step's new keys and values, then
``paged_decode_attention`` of each request's query over its ``seq_lens[r]`` cached tokens (the new one
included). On the CPU, where both resolve to the torch backend, that is one C++ operator,
``torch.ops.qwen_ops.attention_decode_step`` (``bindings/cpu/attention_decode_step_cpu.cpp``): its own checks,
all before anything is written, then the same two kernels the ops run, so the result is the composition's bit
for bit. Why: at batch 1 the two ops cost about 0.14 ms a layer in Python checks and custom-op dispatch on an
engine's trusted path (``trusted_metadata``), the operator about 0.03 ms (bench/RESULTS.md). Elsewhere (other
devices or backends, a build without ``qwen_ops._C``) the two ops run one after the other.
"""
from __future__ import annotations

import torch

from .. import _validate as check
from .._backend import resolved_backend
from .._cpu_kernels import LazyCpuOp
from .._library import resolved_scale
from ..cache.op import reshape_and_cache
from .op import I32, _check_new_kv, _check_query_and_cache, paged_decode_attention

OP = "attention_decode_step"
# The ops it stands for: the C++ operator serves only where the torch backend serves both.
COMPOSED_OPS = ("reshape_and_cache", "paged_decode_attention")
# The query dtypes the C++ operator takes (its decode kernel attends in float32); float16 runs the two ops.
KERNEL_DTYPES = (torch.float32, torch.bfloat16)


def _check(query, key, value, key_cache, value_cache, slot_mapping, block_tables, seq_lens, k_scale, v_scale):
    """Shapes, dtypes and devices (no values: the C++ operator checks those, the composed ops theirs)."""
    _, hkv, _, _ = _check_query_and_cache(OP, query, key_cache, value_cache, k_scale, v_scale, values=False)
    _check_new_kv(OP, query, key, value, hkv)
    n = query.shape[0]
    check.tensor(OP, "slot_mapping", slot_mapping, dtypes=check.INDEX_DTYPES, shape=(n,), layout=f"[N] = [{n}]")
    check.tensor(OP, "block_tables", block_tables, dtypes=I32, ndim=2, layout="[N, M] int32")
    check.tensor(OP, "block_tables", block_tables, shape=(n, None), layout=f"[N, M] with N = {n}")
    check.tensor(OP, "seq_lens", seq_lens, dtypes=I32, shape=(n,), layout=f"[N] = [{n}] int32")
    check.same_device(OP, query=query, key=key, value=value, key_cache=key_cache, value_cache=value_cache,
                      slot_mapping=slot_mapping, block_tables=block_tables, seq_lens=seq_lens, k_scale=k_scale,
                      v_scale=v_scale)


def _check_newest_slots(slot_mapping, block_tables, seq_lens, block_size) -> None:
    """Each slot is -1 or the slot of its request's newest token (what attention then reads as that token)."""
    newest = seq_lens.to(torch.int64) - 1
    slots = slot_mapping.to(torch.int64)
    if block_tables.shape[1]:
        column = (newest.clamp(min=0) // block_size).clamp(max=block_tables.shape[1] - 1)
        expected = block_tables.to(torch.int64).gather(1, column[:, None])[:, 0] * block_size + newest % block_size
        elsewhere = slots != expected
    else:  # no blocks: no slot is any token's
        elsewhere = torch.ones_like(slots, dtype=torch.bool)
    bad = (slots != -1) & ((newest < 0) | elsewhere)
    if bool(bad.any()):
        r = int(bad.to(torch.uint8).argmax())  # the first bad row
        raise ValueError(f"{OP}: slot_mapping[{r}] = {int(slots[r])} must be -1 or the slot of request {r}'s "
                         f"newest token (position seq_lens - 1 = {int(newest[r])} in its block table)")


def _cpu_kernel_fake(query, key, value, key_cache, value_cache, slot_mapping, block_tables, seq_lens, scale, k_scale,
                     v_scale):
    """The C++ operator's fake (shape-only, for ``torch.compile``), registered by ``attention_decode_step_available``."""
    _check(query, key, value, key_cache, value_cache, slot_mapping, block_tables, seq_lens, k_scale, v_scale)
    return torch.empty_like(query)


_CPU_KERNEL = LazyCpuOp(OP, _cpu_kernel_fake)


def attention_decode_step_available() -> bool:
    """True when ``qwen_ops._C`` was built with the C++ operator (the first call loads the extension and
    registers the operator's fake)."""
    return _CPU_KERNEL.available()


def takes_cpu_kernel(device: torch.device, backends: dict[str, str | None]) -> bool:
    """Whether a call on ``device`` runs the C++ operator: CPU tensors, every op of ``COMPOSED_OPS`` resolved to
    the torch backend (``backends``: op -> the backend asked for, None for the device's choice), ``qwen_ops._C``
    built. Inside a trace only a kernel looked up before counts (a trace cannot load the extension)."""
    if device.type != "cpu":
        return False
    if any(resolved_backend(op, backends.get(op), device) != "torch" for op in COMPOSED_OPS):
        return False
    return _CPU_KERNEL.found if torch.compiler.is_compiling() else attention_decode_step_available()


def attention_decode_step(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, key_cache: torch.Tensor,
                          value_cache: torch.Tensor, slot_mapping: torch.Tensor, block_tables: torch.Tensor,
                          seq_lens: torch.Tensor, *, scale: float | None = None, k_scale: torch.Tensor | None = None,
                          v_scale: torch.Tensor | None = None, backend: str | None = None) -> torch.Tensor:
    """Write a decode step's new keys and values into the paged cache, then attend (one query row per request).

    Args:
        query: [N, Hq, D] float16, bfloat16 or float32, one row per request (float16 runs the two ops).
        key, value: [N, Hkv, D], query's dtype: each request's newest token.
        key_cache, value_cache: [NB, Hkv, Bs, D] paged BNSD caches, contiguous, not overlapping; query's dtype
            or int8 (then k_scale, v_scale float32 [Hkv, D], finite and > 0). Written in place.
        slot_mapping: [N] int32/int64: row r's slot, ``block_tables[r, p // Bs] * Bs + p % Bs`` with
            ``p = seq_lens[r] - 1``, or -1 (not written). Slots are unique.
        block_tables: [N, M] int32; seq_lens: [N] int32 in [0, M * Bs], each request's tokens after this step
            (0: a zero output row).
        scale: the softmax scale, default ``D ** -0.5``.
        backend: "torch", "triton", "ascendc" or None (the device decides), as every op.
    Returns:
        [N, Hq, D] in query's dtype (softmax in float32): ``paged_decode_attention`` after
        ``reshape_and_cache``, bit for bit.
    Raises:
        ValueError or TypeError naming the op and the argument (RuntimeError from the C++ operator) on a wrong
        device, dtype, shape or value, including a slot that is not its request's newest position: nothing is
        written then.
    """
    scale = resolved_scale(OP, scale, query.shape[-1])
    if (backend in (None, "torch") and query.dtype in KERNEL_DTYPES
            and takes_cpu_kernel(query.device, dict.fromkeys(COMPOSED_OPS, backend))):
        return torch.ops.qwen_ops.attention_decode_step(query, key, value, key_cache, value_cache, slot_mapping,
                                                        block_tables, seq_lens, scale, k_scale, v_scale)
    _check(query, key, value, key_cache, value_cache, slot_mapping, block_tables, seq_lens, k_scale, v_scale)
    if check.values_checked(query.device):
        _check_newest_slots(slot_mapping, block_tables, seq_lens, key_cache.shape[2])
    reshape_and_cache(key, value, key_cache, value_cache, slot_mapping, k_scale, v_scale, backend=backend)
    return paged_decode_attention(query, key_cache, value_cache, block_tables, seq_lens, scale=scale,
                                  k_scale=k_scale, v_scale=v_scale, backend=backend)
