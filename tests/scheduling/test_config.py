"""Configuration checks and vLLM's default batch limits."""

import logging

import pytest

from qwen_ops.scheduling import Scheduler, SchedulerConfig, default_batch_limits

BASE = dict(max_num_batched_tokens=64, max_num_seqs=4, block_size=4, num_blocks=9, max_model_len=64)


@pytest.mark.parametrize(
    "overrides, error, name",
    [
        (dict(block_size=0), ValueError, "block_size"),
        (dict(num_blocks=1), ValueError, "num_blocks"),
        (dict(max_num_seqs=2.5), TypeError, "max_num_seqs"),
        (dict(policy="lifo"), ValueError, "policy"),
        (dict(max_num_batched_tokens=32, enable_chunked_prefill=False), ValueError, "max_num_batched_tokens"),
        (dict(max_num_seqs=65), ValueError, "max_num_seqs"),
        (dict(long_prefill_token_threshold=65), ValueError, "long_prefill_token_threshold"),
        (dict(num_speculative_tokens=64), ValueError, "num_speculative_tokens"),
        (dict(num_gdn_groups=3, enable_prefix_caching=True, enable_chunked_prefill=False), ValueError,
         "enable_chunked_prefill"),
        (dict(num_gdn_groups=-1), ValueError, "num_gdn_groups"),
        (dict(num_gdn_groups=256), ValueError, "num_gdn_groups"),
        (dict(num_gdn_groups=2.0), TypeError, "num_gdn_groups"),
        (dict(enable_chunked_prefill="no"), TypeError, "enable_chunked_prefill"),
        (dict(enable_prefix_caching=1), TypeError, "enable_prefix_caching"),
        (dict(reserve_full_prompt=None), TypeError, "reserve_full_prompt"),
    ],
)
def test_bad_config_names_the_argument(overrides, error, name):
    with pytest.raises(error, match=name):
        SchedulerConfig(**{**BASE, **overrides})


def test_null_block_is_not_usable():
    assert SchedulerConfig(**BASE).num_usable_blocks == 8
    assert Scheduler(SchedulerConfig(**BASE)).num_free_blocks == 8


@pytest.mark.parametrize(
    "memory, name, usage, expected",
    [
        (192, "NVIDIA B200", "server", (16384, 1024)),
        (160, "NVIDIA B200", "offline", (16384, 1024)),
        (141, "NVIDIA H200", "server", (8192, 1024)),
        (80, "NVIDIA H100", "offline", (16384, 1024)),
        (80, "NVIDIA A100-SXM4-80GB", "server", (2048, 256)),
        (80, "NVIDIA A100-SXM4-80GB", "offline", (8192, 256)),
        (64, "Ascend910B3", "server", (2048, 256)),
        (69.9, "Ascend910B3", "offline", (8192, 256)),
    ],
)
def test_default_batch_limits(memory, name, usage, expected):
    assert default_batch_limits(memory, name, usage) == expected


def test_default_batch_limits_rejects_unknown_usage():
    with pytest.raises(ValueError, match="usage"):
        default_batch_limits(80, "x", "batch")


def test_scheduler_announces_its_budget(caplog):
    with caplog.at_level(logging.INFO, logger="qwen_ops.scheduling"):
        Scheduler(SchedulerConfig(**BASE))
    assert "qwen_ops scheduler: max_num_batched_tokens=64 max_num_seqs=4" in caplog.text


@pytest.mark.parametrize(
    "args, error, name",
    [
        ((float("nan"), "x", "server"), ValueError, "memory_gib"),
        (("80", "x", "server"), TypeError, "memory_gib"),
        ((None, "x", "server"), TypeError, "memory_gib"),
        ((True, "x", "server"), TypeError, "memory_gib"),
        ((80, None, "server"), TypeError, "device_name"),
    ],
)
def test_default_batch_limits_names_a_bad_argument(args, error, name):
    with pytest.raises(error, match=name):
        default_batch_limits(*args)
