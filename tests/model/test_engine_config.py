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


def _config_with(tmp_path, **changes):
    import json

    with open(os.path.join(default_model_dir(), "config.json")) as f:
        config = json.load(f)
    config.update(changes)
    with open(tmp_path / "config.json", "w") as f:
        json.dump(config, f)
    return str(tmp_path)


@pytest.mark.parametrize("changes,message", [
    (dict(linear_key_head_dim=264), r"chunk_gated_delta_rule: backend 'ascendc' serves head dims Dk and Dv up to 256 "
                                    r".*got Dk = 264, Dv = 64"),
    (dict(linear_value_head_dim=320), r"chunk_gated_delta_rule: .*up to 256 .*got Dk = 64, Dv = 320"),
    (dict(head_dim=40), r"mixed_attention: backend 'ascendc' needs a head dim that is a multiple of 16 and at most "
                        r"256, got 40"),
], ids=["gdn_key_head_dim", "gdn_value_head_dim", "attention_head_dim"])
def test_a_shape_the_ascendc_kernels_cannot_serve_is_refused_when_the_engine_is_built(tmp_path, changes, message):
    # Refused by EngineConfig (before any weight loads), naming the op and its limit, not in the middle of a step;
    # the same model on a backend without the limit resolves.
    model = _config_with(tmp_path, **changes)
    with pytest.raises(ValueError, match=r"LLM\(backend='ascendc'\) cannot serve this model: " + message):
        EngineConfig.from_args(model, backend="ascendc", **ARGS)
    assert EngineConfig.from_args(model, backend="torch", **ARGS).backend == "torch"


def test_gdn_head_dims_the_ascendc_kernels_pad_are_not_refused(tmp_path):
    model = _config_with(tmp_path, linear_key_head_dim=24, linear_value_head_dim=256)
    assert EngineConfig.from_args(model, backend="ascendc", **ARGS).backend == "ascendc"
