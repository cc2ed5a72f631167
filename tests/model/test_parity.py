"""The qwen_ops Qwen3.5 model against transformers on tiny random checkpoints (both layouts)."""
import pytest
import torch
from checkpoints import hf_greedy, hf_model
from tolerances import MODEL_INT8_KV_VS_TRANSFORMERS, MODEL_VS_TRANSFORMERS, tol

from qwen_ops import LLM, SamplingParams

GREEDY = dict(temperature=0, detokenize=False)


def random_prompt(gen, length, vocab=256):
    return torch.randint(1, vocab, (length,), generator=gen).tolist()


def hf_logprobs(model, token_ids):
    with torch.no_grad():
        return model(torch.tensor([token_ids])).logits[0].float().log_softmax(-1)


def assert_logprobs_match(out, prompt, ref_logprobs, atol):
    """Every returned logprob equals transformers' at the same position and token."""
    assert len(out.logprobs) == len(out.token_ids)
    for i, (token, entry) in enumerate(zip(out.token_ids, out.logprobs)):
        assert token in entry
        row = ref_logprobs[len(prompt) - 1 + i]
        ids = torch.tensor(list(entry))
        torch.testing.assert_close(torch.tensor(list(entry.values())), row[ids], atol=atol, rtol=0)


def test_prompt_logits_match_transformers(checkpoint, gen):
    prompt = random_prompt(gen, 70)  # over one GDN chunk of 64 and several KV blocks
    llm = LLM(checkpoint, num_blocks=32, max_num_seqs=4)
    with torch.no_grad():
        ref = hf_model(checkpoint)(torch.tensor([prompt])).logits[0].float()
    torch.testing.assert_close(llm.score(prompt), ref, **tol(MODEL_VS_TRANSFORMERS, torch.float32))


def test_greedy_tokens_and_logprobs_match_transformers(checkpoint, gen):
    prompt = random_prompt(gen, 23)
    hf = hf_model(checkpoint)
    ref_tokens, _ = hf_greedy(hf, prompt, 12)
    llm = LLM(checkpoint, num_blocks=32, max_num_seqs=4)
    out = llm.generate([prompt], SamplingParams(max_tokens=12, logprobs=4, **GREEDY))[0].outputs[0]
    assert out.token_ids == ref_tokens
    assert out.finish_reason == "length"
    atol, _ = MODEL_VS_TRANSFORMERS[torch.float32]
    assert_logprobs_match(out, prompt, hf_logprobs(hf, prompt + out.token_ids), atol)


def test_tied_embeddings_match_transformers(tied_checkpoint, gen):
    prompt = random_prompt(gen, 17)
    hf = hf_model(tied_checkpoint)
    ref_tokens, _ = hf_greedy(hf, prompt, 6)
    llm = LLM(tied_checkpoint, num_blocks=16, max_num_seqs=2)
    assert llm.generate([prompt], SamplingParams(max_tokens=6, **GREEDY))[0].outputs[0].token_ids == ref_tokens


@pytest.mark.parametrize("max_num_batched_tokens", [8192, 8], ids=["whole_prompt", "chunked"])
def test_int8_kv_logprobs_within_tolerance(multimodal_checkpoint, gen, max_num_batched_tokens):
    prompt = random_prompt(gen, 40)
    llm = LLM(multimodal_checkpoint, kv_cache_dtype="int8", num_blocks=32, max_num_seqs=4,
              max_num_batched_tokens=max_num_batched_tokens)
    assert llm.kv_scale_source.startswith("calibrated")
    assert llm.caches.kv_cache_dtype == torch.int8
    out = llm.generate([prompt], SamplingParams(max_tokens=10, logprobs=3, **GREEDY))[0].outputs[0]
    atol, _ = MODEL_INT8_KV_VS_TRANSFORMERS[torch.float32]
    assert_logprobs_match(out, prompt, hf_logprobs(hf_model(multimodal_checkpoint), prompt + out.token_ids), atol)


def test_int8_kv_uses_checkpoint_scales(text_checkpoint, tmp_path, gen):
    """msModelSlim's kv_cache_scale tensors, when present, are used instead of calibrating."""
    import os
    import shutil

    from safetensors.torch import load_file, save_file

    for name in os.listdir(text_checkpoint):
        shutil.copy(os.path.join(text_checkpoint, name), tmp_path / name)
    tensors = load_file(tmp_path / "model.safetensors")
    k_scale = torch.rand(2 * 32, generator=gen) * 0.02 + 0.03
    v_scale = torch.rand(2 * 32, generator=gen) * 0.02 + 0.01
    tensors["model.layers.3.self_attn.k_proj.kv_cache_scale"] = k_scale
    tensors["model.layers.3.self_attn.v_proj.kv_cache_scale"] = v_scale
    save_file(tensors, tmp_path / "model.safetensors", metadata={"format": "pt"})
    llm = LLM(tmp_path, kv_cache_dtype="int8", num_blocks=16, max_num_seqs=2)
    assert llm.kv_scale_source.startswith("checkpoint")
    torch.testing.assert_close(llm.caches.k_scales[3], k_scale.reshape(2, 32), atol=0, rtol=0)
    torch.testing.assert_close(llm.caches.v_scales[3], v_scale.reshape(2, 32), atol=0, rtol=0)
