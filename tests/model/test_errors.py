"""Bad checkpoints and bad requests give clear errors; the engine keeps serving the others."""
import json
import os
import shutil

import pytest
import torch

from qwen_ops import LLM, SamplingParams
from qwen_ops.model.loading.config import ConfigError, Qwen35Config
from qwen_ops.model.loading.weights import WeightsError

GREEDY = SamplingParams(max_tokens=4, temperature=0, detokenize=False)


def copy_checkpoint(src, dst):
    for name in os.listdir(src):
        shutil.copy(os.path.join(src, name), os.path.join(dst, name))
    return dst


def edit_config(path, **changes):
    file = os.path.join(path, "config.json")
    with open(file) as f:
        raw = json.load(f)
    raw.update(changes)
    with open(file, "w") as f:
        json.dump(raw, f)


def test_unknown_model_type(text_checkpoint, tmp_path):
    edit_config(copy_checkpoint(text_checkpoint, tmp_path), model_type="llama")
    with pytest.raises(ConfigError, match="unsupported model_type 'llama'"):
        LLM(tmp_path)


def test_truncated_safetensors(text_checkpoint, tmp_path):
    copy_checkpoint(text_checkpoint, tmp_path)
    file = tmp_path / "model.safetensors"
    data = file.read_bytes()
    file.write_bytes(data[: len(data) // 2])
    with pytest.raises(WeightsError, match="corrupt or truncated"):
        LLM(tmp_path)


def test_corrupt_safetensors_header(text_checkpoint, tmp_path):
    copy_checkpoint(text_checkpoint, tmp_path)
    file = tmp_path / "model.safetensors"
    data = bytearray(file.read_bytes())
    data[8:40] = b"\xff" * 32  # garbage inside the JSON header
    file.write_bytes(bytes(data))
    with pytest.raises(WeightsError, match="model.safetensors"):
        LLM(tmp_path)


def test_missing_extra_and_misshaped_tensors_are_named(text_checkpoint, tmp_path):
    from safetensors.torch import load_file, save_file

    copy_checkpoint(text_checkpoint, tmp_path)
    file = tmp_path / "model.safetensors"
    original = load_file(file)

    def with_tensors(tensors):
        save_file(tensors, file, metadata={"format": "pt"})

    with_tensors({k: v for k, v in original.items() if k != "model.layers.1.linear_attn.A_log"})
    with pytest.raises(WeightsError, match=r"missing .*layers\.1\.linear_attn\.A_log"):
        LLM(tmp_path)
    with_tensors({**original, "model.layers.0.mystery.weight": torch.ones(2)})
    with pytest.raises(WeightsError, match=r"unexpected .*model\.layers\.0\.mystery\.weight"):
        LLM(tmp_path)
    with_tensors({**original, "model.layers.3.self_attn.k_norm.weight": torch.ones(31)})
    with pytest.raises(WeightsError, match=r"k_norm\.weight.*shape \(31,\).*expected \(32,\)"):
        LLM(tmp_path)


def test_sharded_checkpoint_loads(text_checkpoint, tmp_path, gen):
    """A sharded index is followed; a shard it names but that is missing is an error."""
    from safetensors.torch import load_file, save_file

    tensors = load_file(os.path.join(text_checkpoint, "model.safetensors"))
    shutil.copy(os.path.join(text_checkpoint, "config.json"), tmp_path / "config.json")
    names = sorted(tensors)
    shards = {"model-00001-of-00002.safetensors": names[::2], "model-00002-of-00002.safetensors": names[1::2]}
    for shard, keys in shards.items():
        save_file({k: tensors[k] for k in keys}, tmp_path / shard, metadata={"format": "pt"})
    index = {"weight_map": {k: shard for shard, keys in shards.items() for k in keys}}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    prompt = torch.randint(1, 256, (11,), generator=gen).tolist()
    sharded = LLM(tmp_path, num_blocks=8, max_num_seqs=2).generate([prompt], GREEDY)
    single = LLM(text_checkpoint, num_blocks=8, max_num_seqs=2).generate([prompt], GREEDY)
    assert sharded[0].outputs[0].token_ids == single[0].outputs[0].token_ids
    os.remove(tmp_path / "model-00002-of-00002.safetensors")
    with pytest.raises(WeightsError, match="model-00002-of-00002.safetensors"):
        LLM(tmp_path)


@pytest.mark.parametrize("kwargs, message", [
    (dict(temperature=-0.5), "temperature"),
    (dict(top_p=0.0), "top_p"),
    (dict(top_p=1.5), "top_p"),
    (dict(top_k=-3), "top_k"),
    (dict(max_tokens=0), "max_tokens"),
    (dict(logprobs=-1), "logprobs"),
    (dict(temperature=float("nan")), "temperature"),
])
def test_invalid_sampling_values(kwargs, message):
    with pytest.raises(ValueError, match=f"SamplingParams.{message}"):
        SamplingParams(**kwargs)


def test_bad_requests_leave_the_engine_serving(text_checkpoint, gen):
    llm = LLM(text_checkpoint, num_blocks=32, max_num_seqs=4, max_model_len=64)
    good = [torch.randint(1, 256, (n,), generator=gen).tolist() for n in (10, 7)]
    expected = [o.outputs[0].token_ids for o in llm.generate(good, GREEDY)]
    first = llm.add_request(good[0], GREEDY)
    llm.step()  # the good request is now in flight
    with pytest.raises(ValueError, match="prompt has 64 tokens; max_model_len=64"):
        llm.add_request([1] * 64, GREEDY)
    with pytest.raises(ValueError, match=r"token id 300 outside the vocabulary \[0, 256\)"):
        llm.add_request([1, 300], GREEDY)
    with pytest.raises(TypeError, match="sampling_params must be a SamplingParams"):
        llm.add_request([1, 2], {"temperature": 0})
    # generate() checks every prompt before queueing any, so nothing of this batch runs.
    with pytest.raises(ValueError, match="max_model_len"):
        llm.generate([good[1], [2] * 100], GREEDY)
    assert not any(r not in (first,) for r in llm.scheduler.requests)
    while llm.has_unfinished_requests():
        llm.step()
    assert llm._output(first, forget=True).outputs[0].token_ids == expected[0]
    assert [o.outputs[0].token_ids for o in llm.generate(good, GREEDY)] == expected


def test_abort_finishes_with_reason(text_checkpoint, gen):
    llm = LLM(text_checkpoint, num_blocks=32, max_num_seqs=4)
    rid = llm.add_request(torch.randint(1, 256, (9,), generator=gen).tolist(), SamplingParams(max_tokens=50))
    llm.step()
    assert llm.abort_request(rid)
    assert not llm.abort_request(rid)
    llm.step()
    assert not llm.has_unfinished_requests()
    assert llm._output(rid, forget=True).outputs[0].finish_reason == "abort"


def test_config_layer_types_default_and_bad_values():
    base = dict(model_type="qwen3_5_text", vocab_size=10, hidden_size=8, intermediate_size=8, num_hidden_layers=8,
                num_attention_heads=2, num_key_value_heads=1, head_dim=4, linear_num_key_heads=1,
                linear_num_value_heads=2, linear_key_head_dim=4, linear_value_head_dim=4)
    cfg = Qwen35Config.from_dict(base)
    assert cfg.full_attention_layers == [3, 7]
    assert Qwen35Config.from_dict({**base, "full_attention_interval": 2}).full_attention_layers == [1, 3, 5, 7]
    with pytest.raises(ConfigError, match="layer_types"):
        Qwen35Config.from_dict({**base, "layer_types": ["full_attention"] * 3})
    with pytest.raises(ConfigError, match="missing 'hidden_size'"):
        Qwen35Config.from_dict({k: v for k, v in base.items() if k != "hidden_size"})
    with pytest.raises(ConfigError, match="text_config"):
        Qwen35Config.from_dict({"model_type": "qwen3_5"})


@pytest.mark.parametrize("kwargs, message", [
    (dict(block_size=0), r"LLM\(block_size=...\) must be an int >= 1, got 0"),
    (dict(block_size=-4), r"LLM\(block_size=...\) must be an int >= 1, got -4"),
    (dict(block_size=8.0), r"LLM\(block_size=...\) must be an int"),
    (dict(num_blocks=1), r"LLM\(num_blocks=...\) must be an int >= 2 or None, got 1"),
    (dict(max_num_seqs=0), r"LLM\(max_num_seqs=...\) must be an int >= 1 or None, got 0"),
    (dict(max_num_batched_tokens=0), r"LLM\(max_num_batched_tokens=...\) must be an int >= 1 or None, got 0"),
    (dict(max_num_batched_tokens=4, max_num_seqs=8), r"LLM\(max_num_batched_tokens=4\) must be >= max_num_seqs=8"),
    (dict(max_model_len=1), r"LLM\(max_model_len=...\) must be an int >= 2 or None, got 1"),
    (dict(max_model_len=513), r"LLM\(max_model_len=513\) exceeds the model.s max_position_embeddings=512"),
    (dict(dtype="float64"), r"LLM\(dtype=...\) must be one of"),
    (dict(dtype=torch.float32), r"LLM\(dtype=...\) must be one of"),
    (dict(kv_cache_dtype="fp8"), r"LLM\(kv_cache_dtype=...\) must be 'auto' or 'int8'"),
    (dict(kv_cache_memory_gib=0), r"LLM\(kv_cache_memory_gib=...\) must be a number > 0"),
])
def test_invalid_engine_arguments_name_the_argument(text_checkpoint, kwargs, message):
    with pytest.raises(ValueError, match=message):
        LLM(text_checkpoint, **kwargs)


def test_default_limits_follow_the_given_ones(text_checkpoint):
    llm = LLM(text_checkpoint, num_blocks=8, max_num_batched_tokens=4)  # the default max_num_seqs would exceed 4
    assert llm.scheduler_config.max_num_seqs <= 4


@pytest.mark.parametrize("stop_token_ids", ["12", b"12", [1.5], [True], [None], 7])
def test_stop_token_ids_must_be_int_ids(stop_token_ids):
    with pytest.raises(ValueError, match="SamplingParams.stop_token_ids must be a list of int token ids"):
        SamplingParams(stop_token_ids=stop_token_ids)


def test_stop_token_ids_are_copied_ints():
    ids = [3, torch.tensor(4)]
    params = SamplingParams(stop_token_ids=ids)
    assert params.stop_token_ids == [3, 4] and all(type(t) is int for t in params.stop_token_ids)
    assert ids[0] == 3 and params.stop_token_ids is not ids


def test_prompt_length_limit_is_max_model_len_minus_one(text_checkpoint, gen):
    """The scheduler would accept a prompt of max_model_len tokens that it could never finish
    scheduling (it leaves room for the sampled token); the engine rejects it, and a prompt one
    shorter runs and generates exactly the one token that fits."""
    llm = LLM(text_checkpoint, num_blocks=16, max_num_seqs=2, max_model_len=24)
    with pytest.raises(ValueError, match="prompt has 24 tokens; max_model_len=24 leaves no room"):
        llm.generate([torch.randint(1, 256, (24,), generator=gen).tolist()], GREEDY)
    assert not llm.has_unfinished_requests()
    out = llm.generate([torch.randint(1, 256, (23,), generator=gen).tolist()],
                       SamplingParams(max_tokens=5, temperature=0, ignore_eos=True, detokenize=False))
    assert len(out[0].outputs[0].token_ids) == 1 and out[0].outputs[0].finish_reason == "length"


def test_prefix_caching_without_chunked_prefill_is_refused(text_checkpoint):
    # vLLM's align mode caches GDN states at block-aligned chunk ends: it needs chunked prefill.
    with pytest.raises(ValueError, match=r"LLM\(enable_prefix_caching=True\) needs enable_chunked_prefill=True"):
        LLM(text_checkpoint, num_blocks=16, max_num_seqs=2, enable_prefix_caching=True,
            enable_chunked_prefill=False)


def test_the_engine_schedules_the_gdn_layers_as_vllm_groups(text_checkpoint):
    llm = LLM(text_checkpoint, num_blocks=16, max_num_seqs=2)
    assert (len(llm.config.linear_attention_layers), len(llm.config.full_attention_layers)) == (3, 1)
    assert llm.scheduler_config.num_gdn_groups == 3  # Qwen3.5's 3:1 layout: one group per GDN layer here
