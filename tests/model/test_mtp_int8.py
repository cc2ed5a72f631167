"""MTP speculation on an INT8 KV cache: the target's scales come from the same path as without speculation
(the checkpoint's, else calibration), the MTP layers' own int8 caches get scales calibrated by running the
head over the calibration prompts, and greedy tokens equal the INT8 run without speculation."""
import torch
from test_mtp_engine import ENGINE, mtp, prompts, replaying_drafter, tokens
from test_mtp_requests import run

from qwen_ops import LLM, SamplingParams

GREEDY = SamplingParams(max_tokens=10, temperature=0, detokenize=False)


def test_int8_greedy_equals_int8_without_speculation(text_mtp_checkpoint):
    batch = prompts([9, 5, 13])
    plain = LLM(text_mtp_checkpoint, kv_cache_dtype="int8", **ENGINE)
    want = tokens(plain.generate(batch, GREEDY))
    llm = LLM(text_mtp_checkpoint, kv_cache_dtype="int8", speculative_config=mtp(2), **ENGINE)
    assert "MTP layer(s) calibrated" in llm.kv_scale_source
    caches, config = llm.caches, llm.config
    for i in config.full_attention_layers:  # the target's scales: the same calibration as without MTP
        assert torch.equal(caches.k_scales[i], plain.caches.k_scales[i])
        assert torch.equal(caches.v_scales[i], plain.caches.v_scales[i])
    for layer_id in llm.model_runner.spec.mtp.layer_ids:
        assert caches.key_caches[layer_id].dtype == torch.int8
        for scale in (caches.k_scales[layer_id], caches.v_scales[layer_id]):
            assert scale.shape == (config.num_key_value_heads, config.head_dim)
            assert bool((torch.isfinite(scale) & (scale > 0)).all())
        # Its own absmax, not a target layer's.
        assert not any(torch.equal(caches.k_scales[layer_id], caches.k_scales[i])
                       for i in config.full_attention_layers)
    assert tokens(llm.generate(batch, GREEDY)) == want
    assert all(bool(caches.key_caches[i].ne(0).any()) for i in llm.model_runner.spec.mtp.layer_ids), \
        "the MTP layers' int8 caches were never written"

    # Accepted drafts on the int8 cache: a drafter replaying the int8 answer is always accepted.
    longer = SamplingParams(max_tokens=12, temperature=0, detokenize=False)
    answers = tokens(plain.generate(batch, longer))
    replaying_drafter(llm, {f"r{i}": p + a for i, (p, a) in enumerate(zip(batch, answers))}, 0)
    outputs = run(llm, batch, GREEDY)
    assert tokens(outputs) == want
    assert all(o.metrics["spec_acceptance_rate"] == 1.0 for o in outputs)


def test_int8_with_two_mtp_layers(two_layer_mtp_checkpoint):
    batch = prompts([7, 11], seed=2)
    want = tokens(LLM(two_layer_mtp_checkpoint, kv_cache_dtype="int8", **ENGINE).generate(batch, GREEDY))
    llm = LLM(two_layer_mtp_checkpoint, kv_cache_dtype="int8", speculative_config=mtp(2), **ENGINE)
    first, second = llm.model_runner.spec.mtp.layer_ids
    assert not torch.equal(llm.caches.k_scales[first], llm.caches.k_scales[second])
    assert tokens(llm.generate(batch, GREEDY)) == want
