"""Prefix caching's configuration: vLLM 0.33's defaults, the page-size rule (INT8 included), honest memory,
clear errors at start, and the hit rate ``qwen-generate`` prints."""
import pytest
import torch
from test_generate_cli import byte_level_tokenizer

from checkpoints import save_text_checkpoint
from qwen_ops import LLM, SamplingParams
from qwen_ops.model.worker.kv_cache import (allocate_caches, attention_bytes_per_token, bytes_per_pool_block,
                                     gdn_page_bytes, plan_memory, pool_block_size)
from qwen_ops.model.spec_decode.speculative_config import speculative_config_from_cli
from qwen_ops.scheduling import hybrid_block_size

GREEDY = SamplingParams(max_tokens=3, temperature=0, logprobs=1, detokenize=False)


def test_on_by_default_for_the_hybrid_model_as_in_vllm(text_checkpoint):
    """vLLM 0.33 turns prefix caching on by default for generative hybrid models
    (ModelConfig.is_prefix_caching_supported); so does LLM()."""
    llm = LLM(text_checkpoint, num_blocks=32)
    assert llm.scheduler_config.enable_prefix_caching and llm.enable_prefix_caching
    assert "prefix_caching=on" in llm.budget_summary()
    assert not LLM(text_checkpoint, num_blocks=32, enable_chunked_prefill=False,
                   max_num_batched_tokens=512).scheduler_config.enable_prefix_caching


def test_bad_configurations_are_refused_at_start(text_checkpoint, text_mtp_checkpoint):
    with pytest.raises(ValueError, match="enable_chunked_prefill=True"):
        LLM(text_checkpoint, enable_prefix_caching=True, enable_chunked_prefill=False)
    with pytest.raises(ValueError, match="enable_prefix_caching"):
        LLM(text_checkpoint, enable_prefix_caching="yes")
    # Speculation without an explicit choice runs with prefix caching too, as vLLM 0.33 (MTP + prefix caching:
    # tests/model/test_mtp_prefix_caching.py).
    spec = LLM(text_mtp_checkpoint, num_blocks=32, speculative_config=speculative_config_from_cli(2))
    assert spec.scheduler_config.enable_prefix_caching


def test_a_block_size_that_cannot_hold_a_gdn_page_is_refused(text_checkpoint):
    llm = LLM(text_checkpoint, num_blocks=8, enable_prefix_caching=False)
    config = llm.config
    page = gdn_page_bytes(config, torch.float32)
    per_token = attention_bytes_per_token(config, torch.float32)
    small = 4
    assert small * per_token < page
    with pytest.raises(ValueError, match="cannot hold a GDN page"):
        allocate_caches(config, num_blocks=8, block_size=small, num_state_slots=0, dtype=torch.float32,
                        kv_dtype=torch.float32, device=torch.device("cpu"), gdn_in_pages=True)


def test_requested_block_size_is_raised_by_vllms_rule(text_checkpoint):
    llm = LLM(text_checkpoint, num_blocks=32, block_size=4, mamba_cache_mode="align")
    page = gdn_page_bytes(llm.config, torch.float32)
    per_token = attention_bytes_per_token(llm.config, torch.float32)
    raised = llm.scheduler_config.block_size
    assert raised == hybrid_block_size(4, per_token, page)[0] == 12
    assert raised * per_token >= page > (raised - 4) * per_token
    assert "block_size=12 (raised from 4" in llm.budget_summary()


def test_int8_page_follows_the_int8_attention_page(text_checkpoint, gen):
    """An int8 KV cache shrinks the attention page (a quarter of this float32 model's), so the block that holds
    a GDN page has more tokens."""
    llm = LLM(text_checkpoint, num_blocks=32, kv_cache_dtype="int8", enable_prefix_caching=True,
              mamba_cache_mode="align")
    config = llm.config
    per_token = attention_bytes_per_token(config, torch.int8)
    assert per_token * 4 == attention_bytes_per_token(config, torch.float32)
    block = llm.scheduler_config.block_size
    assert block == pool_block_size(config, 16, torch.float32, torch.int8) == 48
    assert block * per_token >= gdn_page_bytes(config, torch.float32) > (block - 16) * per_token
    assert llm.caches.key_caches[3].shape[2] == block and llm.caches.key_caches[3].dtype == torch.int8
    assert pool_block_size(config, 16, torch.float32, torch.float32) == 16
    prompt = torch.randint(1, 256, (60,), generator=gen).tolist()
    first, second = (llm.generate([prompt], GREEDY)[0] for _ in range(2))
    assert (first.num_cached_tokens, second.num_cached_tokens) == (0, 48)
    assert second.outputs[0].token_ids == first.outputs[0].token_ids
    for a, b in zip(first.outputs[0].logprobs, second.outputs[0].logprobs):
        for token in a:
            assert a[token] == pytest.approx(b[token], abs=1e-4)  # same int8 cache contents: float32 order only


def test_memory_plan_counts_exactly_the_pool(text_checkpoint):
    """Align mode (chunk mode's plan: tests/model/test_chunk_prefix_caching.py). No separate state pool: the
    GDN states are rows of the pool's pages, and the planned bytes are the
    allocated caches' bytes (shared pools counted once)."""
    llm = LLM(text_checkpoint, kv_cache_memory_gib=0.01, max_model_len=256, mamba_cache_mode="align")
    caches, plan = llm.caches, llm.plan
    unique = {id(t): t for d in (caches.key_caches, caches.value_caches, caches.conv_states, caches.ssm_states)
              for t in d.values()}
    allocated = sum(t.numel() * t.element_size() for t in unique.values())
    assert plan.kv_bytes + plan.state_bytes == allocated
    assert plan.num_blocks * bytes_per_pool_block(llm.config, 16, torch.float32, torch.float32) == allocated
    assert allocated <= 0.01 * 2**30
    assert all(t.shape[0] == plan.num_blocks for t in caches.ssm_states.values())
    # Layers at the same position of different GDN groups share pools (a page belongs to one group).
    assert len({id(t) for t in caches.ssm_states.values()}) == 1  # 3 GDN layers, 1 attention layer
    assert plan.state_bytes == plan.num_blocks * gdn_page_bytes(llm.config, torch.float32)
    with pytest.raises(ValueError, match="cannot hold one request"):
        plan_memory(llm.config, budget_bytes=2**14, block_size=16, max_num_seqs=1, max_model_len=256,
                    dtype=torch.float32, kv_dtype=torch.float32, gdn_pages_per_request=6)


def test_qwen_generate_prints_the_hit_rate(tmp_path, capsys):
    from qwen_ops.model.engine.generate import main

    path = save_text_checkpoint(tmp_path / "m", seed=3)
    byte_level_tokenizer(path)
    prompt = "a shared system prompt that is longer than one block of sixteen tokens"
    assert main(["--model", path, "--prompt", prompt, "--prompt", prompt, "--max-tokens", "2", "--temperature",
                 "0", "--num-blocks", "64", "--max-num-seqs", "1", "--enable-prefix-caching"]) == 0
    err = capsys.readouterr().err
    n = len(prompt)
    hit = (n - 1) // 16 * 16
    assert f"prefix cache: {hit} of {2 * n} prompt tokens hit ({100 * hit / (2 * n):.1f} % hit rate)" in err
    assert main(["--model", path, "--prompt", prompt, "--max-tokens", "2", "--num-blocks", "64",
                 "--no-enable-prefix-caching"]) == 0
    err = capsys.readouterr().err
    assert "prefix_caching=off" in err and "prefix cache:" not in err


def test_gdn_state_pages_outside_the_pool_are_refused_before_any_write(text_checkpoint):
    from qwen_ops.model.worker.model_runner import one_request_output

    llm = LLM(text_checkpoint, num_blocks=16, enable_prefix_caching=False)
    runner = llm.model_runner
    before = [t.clone() for t in (runner.caches.ssm_states[0], runner.caches.conv_states[0])]
    runner.add_request("x", SamplingParams(max_tokens=1), torch.Generator())
    with pytest.raises(ValueError, match="group 2 state rows"):
        runner.execute(one_request_output("x", [1, 2], [1], 16, gdn_block_ids=([2], [3], [99])))
    assert torch.equal(before[0], runner.caches.ssm_states[0]) and torch.equal(before[1], runner.caches.conv_states[0])


def test_mamba_cache_mode_defaults_to_chunk_and_takes_vllms_names(text_checkpoint):
    """With prefix caching a hybrid model runs "chunk" unless "align" is named; "none" is the mode without it;
    a mode that contradicts enable_prefix_caching is refused at start, naming the argument."""
    from qwen_ops.model.engine.engine_config import EngineConfig

    def mode(**kwargs):
        config = EngineConfig.from_args(text_checkpoint, num_blocks=32, **kwargs)
        return config.scheduler_config.gdn_cache_mode, config.scheduler_config.block_size

    assert mode() == mode(mamba_cache_mode="chunk") == ("chunk", 16)
    assert mode(block_size=4) == ("chunk", 4)  # the block stays as asked (align raises it to 12)
    assert mode(block_size=4, mamba_cache_mode="align") == ("align", 12)
    assert mode(enable_prefix_caching=False) == mode(enable_prefix_caching=False, mamba_cache_mode="none") \
        == ("none", 16)
    for bad, match in [(dict(mamba_cache_mode="none"), "does not go with enable_prefix_caching=True"),
                       (dict(mamba_cache_mode="align", enable_prefix_caching=False), "does not go with"),
                       (dict(mamba_cache_mode="all"), "must be 'none', 'align', 'chunk' or None")]:
        with pytest.raises(ValueError, match=r"LLM\(mamba_cache_mode=.*" + match):
            mode(**bad)
