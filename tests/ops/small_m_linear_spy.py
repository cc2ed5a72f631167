"""The calls ``model.layers.linear`` makes to ``torch.ops.qwen_ops.small_m_linear``, for the routing tests of
test_small_m_linear.py (float32) and test_small_m_linear_bf16.py (bfloat16)."""
from __future__ import annotations

import contextlib

import torch


@contextlib.contextmanager
def small_m_linear_calls(monkeypatch, record):
    """Yield a list that gets ``record(x)`` for each call's x, with the kernel switched on (and back after)."""
    from qwen_ops.model.network import layers

    calls = []
    real = torch.ops.qwen_ops.small_m_linear

    class Spy:
        def __getattr__(self, name):
            assert name == "small_m_linear"
            return lambda *a: calls.append(record(a[0])) or real(*a)

    monkeypatch.setattr(layers.torch.ops, "qwen_ops", Spy())
    previous = layers.set_small_m_linear(True)
    try:
        yield calls
    finally:
        layers.set_small_m_linear(previous)
