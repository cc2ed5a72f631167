"""Torch stand-ins for the ``torch.ops._C`` CPU helpers that vLLM's CUDA wheel lacks.

vLLM's PyPI wheel is built for CUDA: its CPU worker and CPU sampler call a
few ``_C`` ops that only vLLM's CPU build has. The plug-in replaces the GDN
and attention kernels outright; what is left are these helpers. Each is
defined only when missing, and each definition is announced in the log. They
are minimal: enough for vLLM's CPU path to run, not fast.
"""
from __future__ import annotations

import torch

_LIB: torch.library.Library | None = None
installed: list[str] = []


def _has_c_op(name: str) -> bool:
    try:
        getattr(torch.ops._C, name)
        return True
    except (AttributeError, RuntimeError):
        return False


def _init_cpu_memory_env(nodes: list[int]) -> None:
    # vLLM's CPU build binds the worker's allocations to a NUMA node here; without it the
    # process keeps the default policy, which changes where memory lives, not what is computed.
    return None


def _compute_slot_mapping(query_start_loc: torch.Tensor, positions: torch.Tensor, block_table: torch.Tensor,
                          slot_mapping: torch.Tensor, block_size: int) -> None:
    # slot = block_table[r, pos // block_size] * block_size + pos % block_size for each token of request r.
    counts = (query_start_loc[1:] - query_start_loc[:-1]).to(torch.int64)
    rows = torch.repeat_interleave(torch.arange(counts.numel(), device=counts.device), counts)
    pos = positions[: rows.numel()].to(torch.int64)
    blocks = block_table.to(torch.int64)[rows, pos // block_size]
    slot_mapping[: rows.numel()] = (blocks * block_size + pos % block_size).to(slot_mapping.dtype)


def _greedy_argmax(logits: torch.Tensor) -> torch.Tensor:
    return logits.argmax(dim=-1).view(-1)


_STANDINS = {
    "init_cpu_memory_env": ("init_cpu_memory_env(int[] nodes) -> ()", _init_cpu_memory_env),
    "compute_slot_mapping_kernel_impl": (
        "compute_slot_mapping_kernel_impl(Tensor query_start_loc, Tensor positions, Tensor block_table, "
        "Tensor(a!) slot_mapping, int block_size) -> ()", _compute_slot_mapping),
    "greedy_argmax": ("greedy_argmax(Tensor logits) -> Tensor", _greedy_argmax),
}


def install() -> list[str]:
    """Define the missing helpers under ``torch.ops._C``; returns the names defined (idempotent)."""
    global _LIB
    from vllm.logger import init_logger

    log = init_logger("vllm.qwen_ops_plugin")
    for name, (schema, fn) in _STANDINS.items():
        if name in installed or _has_c_op(name):
            continue
        if _LIB is None:
            _LIB = torch.library.Library("_C", "FRAGMENT")
        _LIB.define(schema)
        _LIB.impl(name, fn, "CompositeImplicitAutograd")
        installed.append(name)
        log.info("qwen_ops plug-in: torch.ops._C.%s is missing from this vLLM build (a CUDA wheel); "
                 "using the plug-in's CPU stand-in", name)
    # The conv-weight pre-packing for vLLM's own C++ CPU conv kernel would call a missing op and
    # leave a packed weight the plug-in's GDN layer cannot read: keep the plain [C, 1, K] weight.
    import vllm._custom_ops as vllm_ops

    if hasattr(vllm_ops, "causal_conv1d_weight_pack") and not _has_c_op("causal_conv1d_weight_pack"):
        del vllm_ops.causal_conv1d_weight_pack
        installed.append("causal_conv1d_weight_pack (disabled)")
        log.info("qwen_ops plug-in: torch.ops._C.causal_conv1d_weight_pack is missing; "
                 "GDN conv weights stay unpacked")
    return list(installed)
