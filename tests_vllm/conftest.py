"""Fixtures of the vLLM plug-in tests: the project's tiny random Qwen3.5 checkpoints (tests/model/checkpoints.py)."""
import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "model"))
sys.path.insert(0, os.path.join(ROOT, "tests"))

from checkpoints import save_multimodal_checkpoint, save_text_checkpoint  # noqa: E402


@pytest.fixture(scope="session")
def text_checkpoint(tmp_path_factory):
    return save_text_checkpoint(tmp_path_factory.mktemp("qwen35_text"), seed=0)


@pytest.fixture(scope="session")
def multimodal_checkpoint(tmp_path_factory):
    return save_multimodal_checkpoint(tmp_path_factory.mktemp("qwen35_mm"), seed=0)


@pytest.fixture(scope="session")
def one_kv_head_checkpoint(tmp_path_factory):
    """One KV head: with tensor_parallel_size=2 vLLM replicates it on both ranks."""
    return save_text_checkpoint(tmp_path_factory.mktemp("qwen35_kv1"), seed=3, num_key_value_heads=1)
