"""The CPU weights moved into huge-page memory (``model/loading/huge_pages.py``): same values, shared stays shared.

The move is a copy into views of one advised mapping; nothing the model computes may change, so an engine
with every weight moved gives the tokens and logprobs of one with none moved.
"""
import pytest
import torch

from qwen_ops import LLM, SamplingParams
from qwen_ops.model.loading import huge_pages
from qwen_ops.model.loading.quantization import Int8Weight

needs_thp = pytest.mark.skipif(not huge_pages.huge_pages_available(),
                               reason="no transparent huge pages here (not Linux, or THP set to 'never')")


def _weights():
    embed = torch.randn(1024, 1024)  # 4 MiB: moved
    return {
        "embed_tokens.weight": embed,
        "lm_head.weight": embed,  # tied: the same tensor under two names
        "layers.0.mlp.down_proj.weight": torch.randn(512, 1024, dtype=torch.bfloat16) * 3,  # 1 MiB: stays
        "layers.0.mlp.gate_up_proj.weight": Int8Weight(
            weight=torch.randint(-127, 128, (4096, 1024), dtype=torch.int8),
            weight_scale=torch.rand(4096), scheme="W8A16"),
        "norm.weight": torch.randn(1024),
    }


@needs_thp
def test_values_dtypes_and_sharing_survive_the_move():
    before = _weights()
    expected = {k: (v.weight if isinstance(v, Int8Weight) else v).clone() for k, v in before.items()}
    small = before["layers.0.mlp.down_proj.weight"]
    moved_dict, moved = huge_pages.move_weights_to_huge_pages(dict(before))
    assert moved == (4 << 20) + (4 << 20)  # the embedding once (tied), the int8 weight; not the small ones
    for name, value in moved_dict.items():
        t = value.weight if isinstance(value, Int8Weight) else value
        assert t.dtype == expected[name].dtype and torch.equal(t, expected[name]), name
    assert moved_dict["embed_tokens.weight"] is moved_dict["lm_head.weight"]
    assert moved_dict["layers.0.mlp.down_proj.weight"] is small
    arena = moved_dict["embed_tokens.weight"].untyped_storage().data_ptr()
    assert moved_dict["layers.0.mlp.gate_up_proj.weight"].weight.untyped_storage().data_ptr() == arena
    assert moved_dict["layers.0.mlp.gate_up_proj.weight"].weight_scale is before[
        "layers.0.mlp.gate_up_proj.weight"].weight_scale


def test_switched_off_the_weights_stay(monkeypatch):
    monkeypatch.setenv(huge_pages.HUGE_PAGES_ENV, "0")
    weights = _weights()
    same = dict(weights)
    out, moved = huge_pages.move_weights_to_huge_pages(weights)
    assert moved == 0 and all(out[k] is same[k] for k in same)


def test_a_refused_mapping_leaves_the_weights(monkeypatch):
    """No room for the mapping (or advice the kernel refuses): the weights stay where they are, nothing fails."""
    def refuse(*args, **kwargs):
        raise OSError(12, "Cannot allocate memory")

    monkeypatch.setenv(huge_pages.HUGE_PAGES_ENV, "1")
    monkeypatch.setattr(huge_pages, "huge_pages_available", lambda: True)
    monkeypatch.setattr(huge_pages.mmap, "mmap", refuse)
    weights = _weights()
    same = dict(weights)
    out, moved = huge_pages.move_weights_to_huge_pages(weights)
    assert moved == 0 and all(out[k] is same[k] for k in same)


@needs_thp
def test_an_engine_with_every_weight_moved_gives_the_same_output(text_checkpoint, monkeypatch):
    params = SamplingParams(max_tokens=6, temperature=0, logprobs=2, detokenize=False)
    prompts = [[5, 9, 2, 7], [11, 3]]
    monkeypatch.setenv(huge_pages.HUGE_PAGES_ENV, "0")
    want = LLM(text_checkpoint, num_blocks=32).generate(prompts, params)
    monkeypatch.setenv(huge_pages.HUGE_PAGES_ENV, "1")
    monkeypatch.setattr(huge_pages, "MIN_BYTES", 1)  # the test checkpoint's tensors are all small
    calls = []
    real = huge_pages.move_weights_to_huge_pages

    def spy(weights):
        result = real(weights)
        calls.append(result[1])
        return result

    monkeypatch.setattr("qwen_ops.model.engine.llm_engine.move_weights_to_huge_pages", spy)
    got = LLM(text_checkpoint, num_blocks=32).generate(prompts, params)
    assert calls and calls[0] > 0
    for a, b in zip(got, want):
        assert a.outputs[0].token_ids == b.outputs[0].token_ids
        assert a.outputs[0].logprobs == b.outputs[0].logprobs
