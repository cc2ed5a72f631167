"""Fixtures of the model tests: tiny transformers checkpoints, saved once per session."""
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))

from checkpoints import save_multimodal_checkpoint, save_text_checkpoint  # noqa: E402


@pytest.fixture(scope="session")
def text_checkpoint(tmp_path_factory):
    return save_text_checkpoint(tmp_path_factory.mktemp("qwen35_text"), seed=0)


@pytest.fixture(scope="session")
def multimodal_checkpoint(tmp_path_factory):
    return save_multimodal_checkpoint(tmp_path_factory.mktemp("qwen35_mm"), seed=0)


@pytest.fixture(scope="session")
def tied_checkpoint(tmp_path_factory):
    return save_text_checkpoint(tmp_path_factory.mktemp("qwen35_tied"), seed=5, tie_word_embeddings=True)


@pytest.fixture(scope="session", params=["text", "multimodal"])
def checkpoint(request, text_checkpoint, multimodal_checkpoint):
    return text_checkpoint if request.param == "text" else multimodal_checkpoint
