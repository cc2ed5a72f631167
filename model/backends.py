"""Which kernel backend each op of the model runs on.

An engine asks for one backend (``LLM(backend=...)``), but a backend may
implement only some ops: the Ascend C kernels cover the decode path
(``reshape_and_cache``, ``paged_decode_attention``, the recurrent GDN update,
``causal_conv1d_update``) and nothing else yet. The model then runs every op
that backend implements on it, and the others on the device's default
backend, so a partial backend still serves a whole step.
"""
from __future__ import annotations

from typing import Callable

from ..ops._backend import BACKENDS, IMPLEMENTATIONS


def backend_chooser(requested: str | None) -> Callable[[str], str | None]:
    """``op name -> backend`` for a requested backend (None: the device decides for every op)."""
    if requested is not None and requested not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS} or None, got {requested!r}")

    def choose(op: str) -> str | None:
        return requested if requested in IMPLEMENTATIONS[op] else None

    return choose


def describe(requested: str | None) -> str:
    """One line for the engine's start-up report: which ops fall back, if any."""
    if requested is None:
        return "backend: chosen by device for every op"
    fallback = sorted(op for op, impls in IMPLEMENTATIONS.items() if requested not in impls)
    if not fallback:
        return f"backend: {requested} for every op"
    return f"backend: {requested}; device default for {', '.join(fallback)} (not implemented by {requested})"
