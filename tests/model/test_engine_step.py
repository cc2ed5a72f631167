"""The engine's step API and its defaults: step() returns that step's RequestOutputs; CPU budget and max_model_len."""
import logging

import pytest
import torch

import qwen_ops
from qwen_ops import LLM, RequestOutput, SamplingParams
from qwen_ops.model import engine as engine_module
from qwen_ops.model.engine import LLMEngine

GREEDY = SamplingParams(max_tokens=4, temperature=0, detokenize=False)


def test_step_returns_the_outputs_of_that_step(text_checkpoint, gen):
    prompts = [torch.randint(1, 256, (n,), generator=gen).tolist() for n in (5, 9)]
    llm = LLM(text_checkpoint, num_blocks=32, max_num_seqs=2)
    expected = {i: o.outputs[0].token_ids for i, o in enumerate(llm.generate(prompts, GREEDY))}
    ids = [llm.add_request(p, GREEDY) for p in prompts]
    seen = {r: [] for r in ids}
    finished = set()
    while llm.has_unfinished_requests():
        outputs = llm.step()
        assert all(isinstance(o, RequestOutput) for o in outputs)
        for o in outputs:
            assert o.request_id not in finished
            tokens = o.outputs[0].token_ids
            assert tokens[: len(seen[o.request_id])] == seen[o.request_id] and len(tokens) > len(seen[o.request_id])
            seen[o.request_id] = tokens
            if o.finished:
                finished.add(o.request_id)
                assert o.outputs[0].finish_reason == "length"
    assert finished == set(ids)
    assert [seen[r] for r in ids] == [expected[0], expected[1]]


def test_engine_is_usable_without_llm_and_names_stay_importable(text_checkpoint):
    engine = LLMEngine(text_checkpoint, num_blocks=32, max_num_seqs=2)
    rid = engine.add_request([3, 4, 5], GREEDY)
    outputs = []
    while engine.has_unfinished_requests():
        outputs += engine.step()
    assert outputs[-1].request_id == rid and outputs[-1].finished and len(outputs[-1].outputs[0].token_ids) == 4
    assert engine_module.LLM is qwen_ops.LLM and qwen_ops.SamplingParams is SamplingParams


def test_cpu_budget_follows_available_memory(text_checkpoint, monkeypatch):
    from qwen_ops.model.worker import device_memory

    monkeypatch.setattr(device_memory, "cpu_available_gib", lambda: 3.0)
    llm = LLM(text_checkpoint, num_blocks=32, max_num_seqs=2)
    assert llm.kv_cache_memory_gib == pytest.approx(device_memory.CPU_KV_MEMORY_FRACTION * 3.0)
    monkeypatch.undo()
    assert 0 < device_memory.cpu_available_gib() < device_memory.device_memory(torch.device("cpu"))[0]


def test_max_model_len_is_fitted_to_the_budget_when_not_given(text_checkpoint, caplog):
    # Tiny model: a 16-token block carries an 8 KiB KV page and a 5.5 KiB GDN state row (the states live
    # in the pool's pages); 200 KiB hold 14 blocks, 13 usable, of which a request's GDN pages (3 GDN
    # groups, at most 2 live pages each in prefix caching's align mode, named) leave 7 for its tokens.
    budget = 200 / 2**20
    with caplog.at_level(logging.WARNING, logger="qwen_ops.engine"):
        llm = LLM(text_checkpoint, max_num_seqs=2, kv_cache_memory_gib=budget, mamba_cache_mode="align")
    assert llm.scheduler_config.num_gdn_groups == 3
    assert llm.max_model_len == (13 - 6) * 16 < llm.config.max_position_embeddings
    assert "max_model_len=112 (fitted to the KV budget" in caplog.text
    assert "fitted to the KV budget" in llm.budget_summary()
    out = llm.generate([[1] * 105], SamplingParams(max_tokens=3, temperature=0, detokenize=False))
    assert len(out[0].outputs[0].token_ids) == 3
    with pytest.raises(ValueError, match="cannot hold one request of max_model_len=512"):
        LLM(text_checkpoint, max_num_seqs=2, kv_cache_memory_gib=budget, max_model_len=512, mamba_cache_mode="align")


@pytest.mark.parametrize("bad", [float("inf"), float("nan"), 0.0])
def test_checkpoint_kv_scales_are_checked_once_at_load(bad):
    from qwen_ops.model.loading.kv_scales import as_channel_scale

    assert as_channel_scale(torch.tensor([0.5]), "s", (2, 4)).shape == (2, 4)
    with pytest.raises(ValueError, match="must be finite and > 0"):
        as_channel_scale(torch.full((8,), bad), "s", (2, 4))
