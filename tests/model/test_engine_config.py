"""EngineConfig: LLM's arguments resolved and the memory planned before anything is built; the engine builds from it."""
import os
import shutil

import pytest

from qwen_ops import LLM
from qwen_ops.model.engine import EngineConfig, LLMEngine
from qwen_ops.model.loading.default_model import default_model_dir
from qwen_ops.model.loading.weights import WeightsError

ARGS = dict(max_num_seqs=4, kv_cache_memory_gib=0.05, max_model_len=256)


def test_the_engine_built_from_a_config_is_the_engine_built_from_its_arguments():
    config = EngineConfig.from_args(**ARGS)
    from_config, from_args = LLMEngine(config), LLM(**ARGS)
    assert from_config.engine_config is config
    assert str(config) == config.describe() == from_config.budget_summary() == from_args.budget_summary()
    assert from_args.llm_engine.engine_config == config
    assert from_config.plan == config.plan and from_config.scheduler_config == config.scheduler_config
    assert from_config.caches.num_blocks == config.plan.num_blocks  # the caches are the ones the plan sized


def test_a_config_is_resolved_without_the_weights(tmp_path):
    # Only config.json: everything resolves (the weights' size comes from the config), and only building
    # the engine reads the weights.
    shutil.copy(os.path.join(default_model_dir(), "config.json"), tmp_path / "config.json")
    config = EngineConfig.from_args(str(tmp_path), **ARGS)
    assert config.model_dir == str(tmp_path) and config.plan.num_blocks >= 2
    with pytest.raises((WeightsError, FileNotFoundError)):
        LLMEngine(config)


def test_a_bad_argument_is_refused_before_the_weights_load(tmp_path):
    shutil.copy(os.path.join(default_model_dir(), "config.json"), tmp_path / "config.json")
    with pytest.raises(ValueError, match=r"LLM\(kv_cache_memory_gib=...\) must be a number > 0"):
        EngineConfig.from_args(str(tmp_path), kv_cache_memory_gib=-1.0)
    with pytest.raises(ValueError, match=r"exceeds the model's max_position_embeddings"):
        EngineConfig.from_args(str(tmp_path), max_model_len=10**9)


def test_a_ready_config_takes_no_other_argument():
    config = EngineConfig.from_args(**ARGS)
    with pytest.raises(TypeError, match="takes no other arguments"):
        LLMEngine(config, dtype="float16")
