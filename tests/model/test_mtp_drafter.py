"""The MTP drafter against an independent computation with transformers' own Qwen3.5 modules, both layouts."""
import json
import os
import shutil

import pytest
import torch
from checkpoints import TINY_TEXT
from mtp_reference import BLOCK_SIZE, NUM_BLOCKS, HFReference, target_hidden
from safetensors.torch import load_file, save_file
from step_batches import prompt_batch, request_batch
from tolerances import MODEL_VS_TRANSFORMERS, tol

from qwen_ops.model.worker.kv_cache import ModelCaches
from qwen_ops.model.network.mtp import MTPWeightsError, Qwen35MTP, add_mtp_kv_caches, load_mtp_weights
from qwen_ops.model.network.qwen3_5 import Qwen35ForCausalLM


@pytest.fixture(params=["text", "multimodal"])
def mtp_checkpoint(request, text_mtp_checkpoint, multimodal_mtp_checkpoint):
    return text_mtp_checkpoint if request.param == "text" else multimodal_mtp_checkpoint


def mtp_caches(target, mtp):
    caches = ModelCaches(block_size=BLOCK_SIZE, num_blocks=NUM_BLOCKS, num_state_slots=1)
    add_mtp_kv_caches(caches, target.config, mtp.layer_ids, target.dtype, target.device)
    return caches


def test_two_draft_steps_match_transformers_modules(mtp_checkpoint, gen):
    """Step 0 over a whole prompt (positions 0..9, target hidden states), step 1 a decode at position 10 on the
    MTP's own hidden state and paged KV cache: both equal the transformers computation, logits included."""
    target = Qwen35ForCausalLM.from_pretrained(mtp_checkpoint)
    mtp = Qwen35MTP.from_pretrained(mtp_checkpoint, target)
    assert mtp.layer_ids == [TINY_TEXT["num_hidden_layers"]]
    prompt = torch.randint(1, 256, (11,), generator=gen).tolist()
    h = target_hidden(target, prompt[:10])
    caches = mtp_caches(target, mtp)
    batch0 = prompt_batch(prompt[1:11], BLOCK_SIZE)
    drafts0, out0 = mtp.greedy_draft(batch0, h, caches, step=0)

    ref = HFReference(mtp_checkpoint, layer=0)
    rows0 = ref.fc_input(prompt[1:11], h)
    want0 = ref.layer_over(rows0)
    torch.testing.assert_close(out0, want0, **tol(MODEL_VS_TRANSFORMERS, torch.float32))
    want_logits = torch.nn.functional.linear(want0, ref.lm_head)
    torch.testing.assert_close(mtp.compute_logits(out0), want_logits, **tol(MODEL_VS_TRANSFORMERS, torch.float32))
    assert drafts0.tolist() == want_logits.argmax(-1).tolist()

    d1 = int(drafts0[-1])
    drafts1, out1 = mtp.greedy_draft(request_batch([d1], 10, BLOCK_SIZE, 3, decode=True), out0[-1:], caches,
                                      step=1)
    want1 = ref.layer_over(torch.cat([rows0, ref.fc_input([d1], want0[-1:])]))[-1:]
    torch.testing.assert_close(out1, want1, **tol(MODEL_VS_TRANSFORMERS, torch.float32))
    assert drafts1.tolist() == torch.nn.functional.linear(want1, ref.lm_head).argmax(-1).tolist()


def test_step_selects_the_layer(two_layer_mtp_checkpoint, gen):
    target = Qwen35ForCausalLM.from_pretrained(two_layer_mtp_checkpoint)
    mtp = Qwen35MTP.from_pretrained(two_layer_mtp_checkpoint, target)
    assert mtp.num_layers == 2 and mtp.layer_ids == [4, 5]
    tokens = torch.randint(1, 256, (7,), generator=gen).tolist()
    h = target_hidden(target, tokens[:6])
    outs = []
    for step in (0, 1, 2, 3):
        batch = prompt_batch(tokens[1:7], BLOCK_SIZE)
        outs.append(mtp.forward(batch, h, mtp_caches(target, mtp), step=step))
    for layer in (0, 1):
        ref = HFReference(two_layer_mtp_checkpoint, layer)
        want = ref.layer_over(ref.fc_input(tokens[1:7], h))
        torch.testing.assert_close(outs[layer], want, **tol(MODEL_VS_TRANSFORMERS, torch.float32))
        torch.testing.assert_close(outs[layer + 2], want, **tol(MODEL_VS_TRANSFORMERS, torch.float32))
    assert not torch.allclose(outs[0], outs[1])


def test_weights_load_in_both_layouts_unchanged(mtp_checkpoint):
    target = Qwen35ForCausalLM.from_pretrained(mtp_checkpoint)
    weights = load_mtp_weights(mtp_checkpoint, target.config, torch.float32)
    saved = {k: v for k, v in load_file(os.path.join(mtp_checkpoint, "model.safetensors")).items()
             if k.startswith("mtp.")}
    assert set(weights) == set(saved)
    for name, t in saved.items():
        assert torch.equal(weights[name], t), name
    # The target still loads and ignores the head.
    assert "mtp.fc.weight" not in target.__dict__


def test_a_checkpoint_without_mtp_names_what_is_missing(text_checkpoint, multimodal_checkpoint):
    target = Qwen35ForCausalLM.from_pretrained(text_checkpoint)
    with pytest.raises(MTPWeightsError, match=r"no multi-token-prediction head.*mtp\.fc\.weight.*mtp\.layers"):
        Qwen35MTP.from_pretrained(text_checkpoint, target)
    # The multimodal fixture carries one stray mtp.fc.weight and no layers: still no head.
    mm = Qwen35ForCausalLM.from_pretrained(multimodal_checkpoint)
    with pytest.raises(MTPWeightsError, match=r"no multi-token-prediction head.*1 mtp\.\* tensor"):
        Qwen35MTP.from_pretrained(multimodal_checkpoint, mm)


def _edit(path, tmp_path, change):
    """A copy of the checkpoint at ``path`` with its tensors passed through ``change``."""
    out = tmp_path / "edited"
    out.mkdir()
    tensors = load_file(os.path.join(path, "model.safetensors"))
    change(tensors)
    save_file(tensors, os.fspath(out / "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(path, "config.json")) as f:
        (out / "config.json").write_text(f.read())
    return os.fspath(out)


def test_incomplete_or_misshaped_mtp_weights_are_named(text_mtp_checkpoint, tmp_path):
    from qwen_ops.model.loading.config import Qwen35Config

    config = Qwen35Config.from_pretrained(text_mtp_checkpoint)
    partial = _edit(text_mtp_checkpoint, tmp_path, lambda t: t.pop("mtp.layers.0.self_attn.k_norm.weight"))
    with pytest.raises(MTPWeightsError, match=r"missing 1 MTP tensor.*mtp\.layers\.0\.self_attn\.k_norm\.weight"):
        load_mtp_weights(partial, config, torch.float32)
    (tmp_path / "edited").rename(tmp_path / "partial")
    bad = _edit(text_mtp_checkpoint, tmp_path, lambda t: t.update({"mtp.fc.weight": torch.zeros(64, 64)}))
    with pytest.raises(MTPWeightsError, match=r"'mtp\.fc\.weight'.*shape \(64, 64\), expected \(64, 128\)"):
        load_mtp_weights(bad, config, torch.float32)
    (tmp_path / "edited").rename(tmp_path / "bad")
    extra = _edit(text_mtp_checkpoint, tmp_path, lambda t: t.update({"mtp.layers.1.input_layernorm.weight":
                                                                      torch.zeros(64)}))
    with pytest.raises(MTPWeightsError, match=r"unexpected MTP tensor.*mtp\.layers\.1\.input_layernorm"):
        load_mtp_weights(extra, config, torch.float32)


def test_mtp_kv_caches_refuse_a_taken_layer_id():
    from qwen_ops.model.loading.config import Qwen35Config

    config = Qwen35Config.from_dict({"model_type": "qwen3_5_text", **TINY_TEXT, "mtp_num_hidden_layers": 1})
    caches = ModelCaches(block_size=4, num_blocks=3, num_state_slots=1)
    add_mtp_kv_caches(caches, config, [4], torch.float32, "cpu")
    assert caches.key_caches[4].shape == (3, 2, 4, 32)
    with pytest.raises(ValueError, match="layer id 4 already has a KV cache"):
        add_mtp_kv_caches(caches, config, [4], torch.float32, "cpu")
    with pytest.raises(ValueError, match="int8 KV cache needs k/v scales"):
        add_mtp_kv_caches(caches, config, [5], torch.int8, "cpu")
    assert 5 not in caches.key_caches


def test_mtp_weights_in_their_own_shard(text_mtp_checkpoint, tmp_path):
    """Published checkpoints are sharded (the head often in a shard of its own): read through the index."""
    from qwen_ops.model.loading.config import Qwen35Config

    out = tmp_path / "sharded"
    out.mkdir()
    shutil.copy(os.path.join(text_mtp_checkpoint, "config.json"), out / "config.json")
    tensors = load_file(os.path.join(text_mtp_checkpoint, "model.safetensors"))
    head = {k: v for k, v in tensors.items() if k.startswith("mtp.")}
    body = {k: v for k, v in tensors.items() if not k.startswith("mtp.")}
    save_file(body, os.fspath(out / "model-00001-of-00002.safetensors"), metadata={"format": "pt"})
    save_file(head, os.fspath(out / "model-00002-of-00002.safetensors"), metadata={"format": "pt"})
    weight_map = {k: "model-00001-of-00002.safetensors" for k in body}
    weight_map.update({k: "model-00002-of-00002.safetensors" for k in head})
    (out / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    weights = load_mtp_weights(out, Qwen35Config.from_pretrained(out), torch.float32)
    assert set(weights) == set(head) and all(torch.equal(weights[k], head[k]) for k in head)
