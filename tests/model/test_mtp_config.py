"""speculative_config parsing and the speculative-decoding statistics."""
import pytest

from qwen_ops.model.loading.config import Qwen35Config
from qwen_ops.model.network.mtp import count_mtp_layers
from qwen_ops.model.spec_decode.stats import SpecDecodingStats
from qwen_ops.model.spec_decode.speculative_config import (SpeculativeConfig, parse_speculative_config,
                                               speculative_config_from_cli)


def parse(value, layers=1, budget=64):
    return parse_speculative_config(value, num_mtp_layers=layers, max_num_batched_tokens=budget, model_name="ckpt")


def test_valid_configs():
    assert parse(None) is None
    cfg = parse({"method": "mtp", "num_speculative_tokens": 3})
    assert cfg == SpeculativeConfig("mtp", 3) and cfg.state_rows_per_request == 4
    assert parse({"method": "mtp"}, layers=2).num_speculative_tokens == 2  # vLLM: defaults to the MTP layers
    assert parse({"method": "mtp", "num_speculative_tokens": 4}, layers=2).num_speculative_tokens == 4
    assert parse(cfg) == cfg
    assert speculative_config_from_cli(2) == {"method": "mtp", "num_speculative_tokens": 2}
    assert speculative_config_from_cli(0) is None and speculative_config_from_cli(None) is None


@pytest.mark.parametrize("value, layers, error, match", [
    ({"method": "mtp", "num_speculative_tokens": 0}, 1, ValueError, "must be >= 1, got 0"),
    ({"method": "mtp", "num_speculative_tokens": -2}, 1, ValueError, "must be >= 1, got -2"),
    ({"method": "mtp", "num_speculative_tokens": 64}, 1, ValueError, r"\(64\) must be < max_num_batched_tokens \(64\)"),
    ({"method": "mtp", "num_speculative_tokens": 3}, 2, ValueError, "multiple of the 2 MTP layers of ckpt"),
    ({"method": "mtp", "num_speculative_tokens": 2}, 0, ValueError, r"needs MTP weights \(mtp\.fc.*ckpt has none"),
    ({"method": "mtp", "num_speculative_tokens": 2.0}, 1, TypeError, "must be an int >= 1"),
    ({"method": "mtp", "num_speculative_tokens": True}, 1, TypeError, "must be an int >= 1"),
    ({"method": "ngram", "num_speculative_tokens": 2}, 1, ValueError, r"\['method'\] must be one of \['mtp'\]"),
    ({"num_speculative_tokens": 2}, 1, ValueError, r"\['method'\] must be one of"),
    ({"method": "mtp", "num_speculative_tokens": 2, "model": "x"}, 1, ValueError, r"unsupported key\(s\) \['model'\]"),
    ([("method", "mtp")], 1, TypeError, "must be a dict"),
])
def test_bad_configs_are_named(value, layers, error, match):
    with pytest.raises(error, match=match):
        parse(value, layers=layers)


def test_mtp_layers_are_counted_from_the_checkpoint(text_mtp_checkpoint, multimodal_mtp_checkpoint, text_checkpoint):
    for path in (text_mtp_checkpoint, multimodal_mtp_checkpoint):
        assert count_mtp_layers(path, Qwen35Config.from_pretrained(path)) == 1
    assert count_mtp_layers(text_checkpoint, Qwen35Config.from_pretrained(text_checkpoint)) == 0
    with pytest.raises(ValueError, match="needs MTP weights"):
        parse({"method": "mtp", "num_speculative_tokens": 1},
              layers=count_mtp_layers(text_checkpoint, Qwen35Config.from_pretrained(text_checkpoint)))


def test_statistics_follow_vllm_definitions():
    stats = SpecDecodingStats(3)
    assert stats.acceptance_rate is None and stats.mean_acceptance_length is None
    for drafted, accepted in [(3, 3), (3, 0), (0, 0), (2, 1), (3, 2)]:  # (0, 0): no draft, not counted
        stats.observe(drafted, accepted)
    # by hand: 11 drafted, 6 accepted over 4 drafts; positions accepted 3, 2, 1 times
    assert (stats.num_drafts, stats.num_draft_tokens, stats.num_accepted_tokens) == (4, 11, 6)
    assert stats.acceptance_rate == 6 / 11
    assert stats.mean_acceptance_length == 1 + 6 / 4
    assert stats.acceptance_rate_per_pos == [3 / 4, 2 / 4, 1 / 4]
    metrics = stats.as_metrics()
    assert metrics["spec_num_draft_tokens"] == 11 and metrics["spec_mean_acceptance_length"] == 2.5
    assert [metrics[f"spec_acceptance_rate_pos_{i}"] for i in range(3)] == [0.75, 0.5, 0.25]
    assert all(isinstance(v, (int, float)) for v in metrics.values())
    assert set(SpecDecodingStats(2).as_metrics()) == {"spec_num_drafts", "spec_num_draft_tokens",
                                                      "spec_num_accepted_tokens"}
    assert "mean acceptance length 2.50" in stats.summary() and "6/11" in stats.summary()
    other = SpecDecodingStats(3)
    other.observe(1, 1)
    stats.merge(other)
    assert stats.num_accepted_tokens_per_pos == [4, 2, 1] and stats.num_drafts == 5
    with pytest.raises(ValueError, match="accepted \\(3\\) <= drafted \\(2\\)"):
        stats.observe(2, 3)
    with pytest.raises(ValueError, match="must be an int >= 1"):
        SpecDecodingStats(0)
