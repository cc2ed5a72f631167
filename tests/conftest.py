"""Test-wide setup.

Triton decides at decoration time whether kernels are compiled or
interpreted, so ``TRITON_INTERPRET`` is set here, before any test module
imports a kernel module. Machines with a GPU run the compiled kernels unless
the caller sets ``TRITON_INTERPRET=1`` themselves.
"""
import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
# Ops on a device check metadata values too (off by default there: each check is a sync).
os.environ.setdefault("QWEN_OPS_CHECK_VALUES", "1")


@pytest.fixture
def gen():
    """A seeded generator, so every case draws fresh but reproducible inputs."""
    return torch.Generator().manual_seed(1234)
