"""The qwen_ops model on Qwen3.5 MoE checkpoints against transformers 5.24's ``Qwen3_5Moe*`` models.

Tiny random checkpoints (``checkpoints.save_moe_checkpoint``) in both prefixes
(``qwen3_5_moe_text``, multimodal ``qwen3_5_moe``) and both expert layouts
(per-expert tensors, fused 3-D tensors), with norms, GDN gates, router,
shared-expert gate and experts randomised. Routing indices must be exactly
transformers'; logits and logprobs within the dense parity tolerance.
"""
import pytest
import torch
from checkpoints import hf_greedy, hf_moe_model, record_hf_routing
from test_parity import GREEDY, assert_logprobs_match, random_prompt
from tolerances import MODEL_INT8_KV_VS_TRANSFORMERS, MODEL_VS_TRANSFORMERS, tol

from qwen_ops import LLM, SamplingParams


def record_routing(llm) -> dict[int, list[torch.Tensor]]:
    found: dict[int, list[torch.Tensor]] = {}
    llm.model.routing_observer = lambda layer, ids, weights: found.setdefault(layer, []).append(ids.clone())
    return found


def test_routing_and_prompt_logits_match_transformers(moe_checkpoint, gen):
    prompt = random_prompt(gen, 70)  # over one GDN chunk of 64 and several KV blocks
    hf = hf_moe_model(moe_checkpoint)
    hf_routing = record_hf_routing(hf)
    with torch.no_grad():
        ref = hf(torch.tensor([prompt])).logits[0].float()
    llm = LLM(moe_checkpoint, num_blocks=32, max_num_seqs=4)
    routing = record_routing(llm)
    logits = llm.score(prompt)
    layers = llm.config.num_hidden_layers
    assert sorted(routing) == sorted(hf_routing) == list(range(layers))
    for layer in range(layers):
        (ours,), (theirs,) = routing[layer], hf_routing[layer]
        assert ours.shape == (70, llm.config.num_experts_per_tok)
        assert torch.equal(ours, theirs), f"layer {layer}: routing differs from transformers'"
    # The routing is not degenerate: many experts are used, not all tokens agree.
    assert len(torch.unique(routing[0][0])) >= llm.config.num_experts // 2
    torch.testing.assert_close(logits, ref, **tol(MODEL_VS_TRANSFORMERS, torch.float32))


def test_greedy_tokens_and_logprobs_match_transformers(moe_checkpoint, gen):
    prompt = random_prompt(gen, 23)
    hf = hf_moe_model(moe_checkpoint)
    ref_tokens, _ = hf_greedy(hf, prompt, 12)
    llm = LLM(moe_checkpoint, num_blocks=32, max_num_seqs=4)
    out = llm.generate([prompt], SamplingParams(max_tokens=12, logprobs=4, **GREEDY))[0].outputs[0]
    assert out.token_ids == ref_tokens
    with torch.no_grad():
        ref_logprobs = hf(torch.tensor([prompt + out.token_ids])).logits[0].float().log_softmax(-1)
    atol, _ = MODEL_VS_TRANSFORMERS[torch.float32]
    assert_logprobs_match(out, prompt, ref_logprobs, atol)


@pytest.mark.parametrize("max_num_batched_tokens", [8192, 8], ids=["whole_prompt", "chunked"])
def test_int8_kv_logprobs_within_tolerance(moe_text_checkpoint, gen, max_num_batched_tokens):
    prompt = random_prompt(gen, 40)
    llm = LLM(moe_text_checkpoint, kv_cache_dtype="int8", num_blocks=32, max_num_seqs=4,
              max_num_batched_tokens=max_num_batched_tokens)
    assert llm.kv_scale_source.startswith("calibrated")
    assert llm.caches.kv_cache_dtype == torch.int8
    out = llm.generate([prompt], SamplingParams(max_tokens=10, logprobs=3, **GREEDY))[0].outputs[0]
    with torch.no_grad():
        ref = hf_moe_model(moe_text_checkpoint)(torch.tensor([prompt + out.token_ids])).logits[0].float()
    atol, _ = MODEL_INT8_KV_VS_TRANSFORMERS[torch.float32]
    assert_logprobs_match(out, prompt, ref.log_softmax(-1), atol)


def test_mixed_batch_and_chunking_do_not_change_tokens(moe_text_checkpoint, gen):
    """Routing is per token: several requests in one step, chunked, give each one's solo greedy tokens."""
    prompts = [random_prompt(gen, n) for n in (5, 31, 17)]
    params = SamplingParams(max_tokens=6, **GREEDY)
    solo = [LLM(moe_text_checkpoint, num_blocks=32, max_num_seqs=1).generate([p], params)[0].outputs[0].token_ids
            for p in prompts]
    mixed = LLM(moe_text_checkpoint, num_blocks=64, max_num_seqs=4, max_num_batched_tokens=12).generate(
        prompts, params)
    assert [o.outputs[0].token_ids for o in mixed] == solo
