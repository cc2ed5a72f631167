"""Fixtures of the model tests: tiny transformers checkpoints, saved once per session."""
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))

from checkpoints import (save_multimodal_checkpoint, save_multimodal_checkpoint_with_mtp,  # noqa: E402
                         save_text_checkpoint, save_text_checkpoint_with_mtp)


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


# ----------------------------------------------------------------------------- MoE checkpoints

from checkpoints import save_moe_checkpoint  # noqa: E402

MOE_VARIANTS = [("text", "per_expert"), ("text", "fused"), ("multimodal", "fused"), ("multimodal", "per_expert")]


@pytest.fixture(scope="session", params=MOE_VARIANTS, ids=["-".join(v) for v in MOE_VARIANTS])
def moe_checkpoint(request, tmp_path_factory):
    """A tiny random Qwen3.5 MoE checkpoint: text-only or multimodal prefix, per-expert or fused experts."""
    prefix, layout = request.param
    return save_moe_checkpoint(tmp_path_factory.mktemp(f"qwen35_moe_{prefix}_{layout}"), seed=3,
                               multimodal=prefix == "multimodal", layout=layout)


@pytest.fixture(scope="session")
def moe_text_checkpoint(tmp_path_factory):
    """The text-only per-expert MoE checkpoint (what transformers writes), for tests needing just one."""
    return save_moe_checkpoint(tmp_path_factory.mktemp("qwen35_moe_text"), seed=3)


@pytest.fixture(scope="session")
def text_mtp_checkpoint(tmp_path_factory):
    """A text-only checkpoint carrying one MTP layer (mtp.*)."""
    return save_text_checkpoint_with_mtp(tmp_path_factory.mktemp("qwen35_text_mtp"), seed=3)


@pytest.fixture(scope="session")
def multimodal_mtp_checkpoint(tmp_path_factory):
    """A multimodal checkpoint carrying one MTP layer (mtp.* at the top level, as published)."""
    return save_multimodal_checkpoint_with_mtp(tmp_path_factory.mktemp("qwen35_mm_mtp"), seed=4)


@pytest.fixture(scope="session")
def two_layer_mtp_checkpoint(tmp_path_factory):
    return save_text_checkpoint_with_mtp(tmp_path_factory.mktemp("qwen35_text_mtp2"), seed=6, num_mtp_layers=2)
