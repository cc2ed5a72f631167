"""Which kernel backend each op of the model runs on.

An engine asks for one backend (``LLM(backend=...)``), but a backend may
implement only some ops (see the README's op table: the Ascend C kernels do
not cover every op yet). The model then runs every op that backend
implements on it, and the others on the device's default backend, so a
partial backend still serves a whole step.
"""
from __future__ import annotations

from typing import Callable

import torch

from ...ops._backend import BACKENDS, IMPLEMENTATIONS, BackendError, resolved_backend


def backend_chooser(requested: str | None) -> Callable[[str], str | None]:
    """``op name -> backend`` for a requested backend (None: the device decides for every op)."""
    if requested is not None and requested not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS} or None, got {requested!r}")

    def choose(op: str) -> str | None:
        return requested if requested in IMPLEMENTATIONS[op] else None

    return choose


# The ops a Qwen3.5 step calls (model/attention.py, model/gdn.py); tests/model/test_backends.py
# checks this against the ops a step really dispatches. Where one backend serves the three decode ops and
# gdn_decode_step in float32, a GDN layer's decode rows run gdn_decode_step instead of them (model/gdn.py).
MODEL_OPS = ("reshape_and_cache", "mixed_attention", "fused_gdn_gating", "causal_conv1d_update", "causal_conv1d_fn",
             "fused_recurrent_gated_delta_rule", "chunk_gated_delta_rule", "gdn_decode_step")
# ...and a MoE model's expert layers (model/moe.py).
MOE_OPS = ("fused_experts",)


def model_ops(is_moe: bool = False) -> tuple[str, ...]:
    """The ops a step of a dense (or, with ``is_moe``, a MoE) Qwen3.5 model calls."""
    return MODEL_OPS + MOE_OPS if is_moe else MODEL_OPS


def describe(requested: str | None, *, is_moe: bool = False) -> str:
    """One line for the engine's start-up report: which of the model's ops run on the
    requested backend and which fall back to the device default."""
    if requested is None:
        return "backend: chosen by device for every op"
    ops = model_ops(is_moe)
    served = sorted(op for op in ops if requested in IMPLEMENTATIONS[op])
    fallback = sorted(op for op in ops if requested not in IMPLEMENTATIONS[op])
    if not fallback:
        return f"backend: {requested} for every op"
    return (f"backend: {requested} for {', '.join(served) or 'no op'}; device default for {', '.join(fallback)} "
            f"(not implemented by {requested})")


def refuse_unserved_shapes(requested: str | None, config, device: torch.device) -> None:
    """Raise ValueError, when the engine is built, if a kernel the model's ops will run on cannot serve the
    model's head dims (``config``: a ``Qwen35Config``), naming the op and its limit; a step would otherwise
    stop with it in the middle of generation. Only the Ascend C kernels have such limits."""
    choose = backend_chooser(requested)
    on_ascendc = set()
    for op in model_ops(config.is_moe):
        try:
            if resolved_backend(op, choose(op), device) == "ascendc":
                on_ascendc.add(op)
        except BackendError:
            continue  # a backend that cannot serve the device at all says so on the first call, as before
    if not on_ascendc:
        return
    from ...ops import ascendc_backend

    refusals = ascendc_backend.model_shape_refusals(
        attention_head_dim=config.head_dim, gdn_key_head_dim=config.linear_key_head_dim,
        gdn_value_head_dim=config.linear_value_head_dim)
    problems = [why for op, why in sorted(refusals.items()) if op in on_ascendc]
    if problems:
        raise ValueError(f"LLM(backend={requested!r}) cannot serve this model: " + "; ".join(problems))
