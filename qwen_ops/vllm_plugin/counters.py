"""Call counters: which qwen_ops op ran for which vLLM layer, and how often.

Tests read them to prove every GDN and attention layer went through the
plug-in. They live in the process that runs the model (the worker); with
``QWEN_OPS_VLLM_COUNTERS=<path>`` each process also writes its counts there
(as JSON, rewritten at every count: vLLM may end its worker processes without
running exit hooks) so a test can read them from a server or a TP worker.
"""
from __future__ import annotations

import json
import os
from collections import Counter

_counts: Counter = Counter()
_DUMP_ENV = "QWEN_OPS_VLLM_COUNTERS"


def record(layer: str, op: str) -> None:
    _counts[(layer, op)] += 1
    if os.environ.get(_DUMP_ENV):
        _dump()


def snapshot() -> dict[str, dict[str, int]]:
    """{layer name: {op name: calls}} since the last :func:`reset`."""
    out: dict[str, dict[str, int]] = {}
    for (layer, op), n in _counts.items():
        out.setdefault(layer, {})[op] = n
    return out


def reset() -> None:
    _counts.clear()


def _dump() -> None:
    path = os.environ.get(_DUMP_ENV)
    if path and _counts:
        with open(f"{path}.{os.getpid()}.json", "w") as f:
            json.dump(snapshot(), f)
