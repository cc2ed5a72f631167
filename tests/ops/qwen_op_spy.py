"""The calls the model's layers make to one ``torch.ops.qwen_ops`` operator, for the routing tests
(test_small_m_linear.py, test_small_m_linear_bf16.py, test_rms_norm.py, test_int8_linear.py)."""
from __future__ import annotations

import contextlib

import torch


@contextlib.contextmanager
def qwen_op_calls(monkeypatch, name, record):
    """Yield a list that gets ``record(args)`` for each call of ``torch.ops.qwen_ops.<name>`` made through
    ``model.network.layers`` (any other operator looked up there fails the test); the real operator runs."""
    from qwen_ops.model.network import layers

    calls = []
    real = getattr(torch.ops.qwen_ops, name)

    class Spy:
        def __getattr__(self, looked_up):
            assert looked_up == name
            return lambda *a: calls.append(record(a)) or real(*a)

    with monkeypatch.context() as patched:
        patched.setattr(layers.torch.ops, "qwen_ops", Spy())
        yield calls


@contextlib.contextmanager
def small_m_linear_calls(monkeypatch, record):
    """Yield a list that gets ``record(x)`` for each small_m_linear call's x, with the kernel switched on (and
    back after)."""
    from qwen_ops.model.network import layers

    previous = layers.set_small_m_linear(True)
    try:
        with qwen_op_calls(monkeypatch, "small_m_linear", lambda args: record(args[0])) as calls:
            yield calls
    finally:
        layers.set_small_m_linear(previous)
