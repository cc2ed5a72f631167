"""Stacked projections (model/fused_projection.py): load_weights lays each group out back to back, the model
stacks them without a copy, and the stacked calls give the unstacked results (logits included)."""
import os

import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import load_file

from qwen_ops import LLM
from qwen_ops.model.attention import FullAttention
from qwen_ops.model.config import Qwen35Config
from qwen_ops.model.dense_mlp import DenseMLP
from qwen_ops.model.fused_projection import FusedProjection, concat_rows, set_fused_projections
from qwen_ops.model.gdn import GatedDeltaNet
from qwen_ops.model.qwen3_5 import Qwen35ForCausalLM
from qwen_ops.model.weights import fused_groups, load_weights, text_model_name

# A stacked projection against its parts, float32: each output column is the same dot product over
# K <= 128, summed in an order the projection kernel may choose per call (measured: bit-identical here).
STACKED_VS_PARTS = dict(atol=1e-5, rtol=1e-5)


def same_storage(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()


@pytest.fixture
def stacked():
    """Stacked projections on (they are off by default) for the test, restored after it."""
    previous = set_fused_projections(True)
    yield
    set_fused_projections(previous)


def test_concat_rows_is_a_view_of_adjacent_rows_and_a_copy_otherwise():
    buffer = torch.randn(10, 4)
    parts = buffer.split([3, 5, 2])
    stacked = concat_rows(parts)
    assert same_storage(stacked, buffer) and stacked.data_ptr() == buffer.data_ptr()
    assert torch.equal(stacked, buffer) and stacked.is_contiguous()
    # Not back to back (a gap, the wrong order, another storage): a copy, still torch.cat's value.
    for pieces in ([buffer[:3], buffer[4:]], [parts[1], parts[0]], [parts[0], torch.randn(2, 4)]):
        got = concat_rows(pieces)
        assert not same_storage(got, buffer) and torch.equal(got, torch.cat(pieces))
    one_row = torch.randn(6)[None]  # a [1, K] view: its row stride is not K
    assert torch.equal(concat_rows([one_row, torch.randn(2, 6)])[:1], one_row)
    with pytest.raises(ValueError, match="concat_rows: tensors must share dtype, device and trailing shape"):
        concat_rows([torch.randn(2, 4), torch.randn(2, 5)])
    with pytest.raises(ValueError, match="concat_rows"):
        concat_rows([torch.randn(2, 4), torch.randn(2, 4, dtype=torch.float64)])


@pytest.mark.parametrize("rows", [1, 3, 40])
def test_fused_projection_matches_its_parts(rows, stacked):
    gen = torch.Generator().manual_seed(rows)
    weights = [torch.randn(n, 64, generator=gen) for n in (48, 16, 4, 4)]
    biases = [torch.randn(n, generator=gen) for n in (48, 16, 4, 4)]
    x = torch.randn(rows, 64, generator=gen)
    for b in (None, biases):
        proj = FusedProjection(weights, b)
        fused = proj(x)
        previous = set_fused_projections(False)
        try:
            separate = proj(x)
        finally:
            set_fused_projections(previous)
        for i, (got, part) in enumerate(zip(fused, separate)):
            want = F.linear(x, weights[i], None if b is None else b[i])
            torch.testing.assert_close(got, want, **STACKED_VS_PARTS)
            torch.testing.assert_close(part, want, **STACKED_VS_PARTS)
    with pytest.raises(ValueError, match="FusedProjection: 4 weights but 2 biases"):
        FusedProjection(weights, biases[:2])


def test_load_weights_lays_groups_back_to_back_with_the_checkpoint_values(checkpoint, stacked):
    config = Qwen35Config.from_pretrained(checkpoint)
    weights, _ = load_weights(checkpoint, config, torch.float32)
    saved = {text_model_name(k, config.multimodal): v for k, v in
             load_file(os.path.join(checkpoint, "model.safetensors")).items()}
    groups = fused_groups(config)
    assert len(groups) == 2 * config.num_hidden_layers  # a mixer group and an MLP group per layer
    for group in groups:
        for name in group:
            assert torch.equal(weights[name], saved[name].float()), name  # names, shapes, values unchanged
        stacked = concat_rows([weights[name] for name in group])
        assert same_storage(stacked, weights[group[0]]), group  # a view: the group is one buffer
        assert torch.equal(stacked, torch.cat([saved[name].float() for name in group]))


def test_model_stacks_the_loaded_weights_without_copying(text_checkpoint, stacked):
    config = Qwen35Config.from_pretrained(text_checkpoint)
    weights, _ = load_weights(text_checkpoint, config, torch.float32)
    model = Qwen35ForCausalLM(config, weights)
    for i, (mixer, _, _, mlp) in enumerate(model.layers):
        if isinstance(mixer, GatedDeltaNet):
            p = f"layers.{i}.linear_attn.in_proj_"
            stacked, parts = mixer.in_proj.weight, (mixer.qkv_w, mixer.z_w, mixer.b_w, mixer.a_w)
            names = [p + n + ".weight" for n in ("qkv", "z", "b", "a")]
        else:
            assert isinstance(mixer, FullAttention)
            p = f"layers.{i}.self_attn."
            stacked, parts = mixer.qkv.weight, (mixer.q_w, mixer.k_w, mixer.v_w)
            names = [p + n + "_proj.weight" for n in "qkv"]
        assert same_storage(stacked, weights[names[0]])
        for part, name in zip(parts, names):
            assert torch.equal(part, weights[name]), name  # each part is its own weight, in order
        assert isinstance(mlp, DenseMLP) and same_storage(mlp.gate_up.weight, weights[f"layers.{i}.mlp.gate_proj.weight"])
        assert torch.equal(mlp.gate_up.parts[1], weights[f"layers.{i}.mlp.up_proj.weight"])


def test_model_built_from_separate_tensors_stacks_copies(text_checkpoint, stacked):
    """Weights that are not laid out by load_weights (a dict built by hand) are stacked with a copy, same values."""
    config = Qwen35Config.from_pretrained(text_checkpoint)
    loaded, _ = load_weights(text_checkpoint, config, torch.float32)
    weights = {name: t.clone() for name, t in loaded.items()}
    gdn = GatedDeltaNet(config, 0, weights, None)
    assert not same_storage(gdn.in_proj.weight, weights["layers.0.linear_attn.in_proj_qkv.weight"])
    assert torch.equal(gdn.z_w, weights["layers.0.linear_attn.in_proj_z.weight"])


def test_logits_and_tokens_match_unstacked_projections(checkpoint, gen, stacked):
    prompt = torch.randint(1, 256, (37,), generator=gen).tolist()  # a prefill (F.linear) ...
    llm = LLM(checkpoint, num_blocks=32, max_num_seqs=2)
    from qwen_ops import SamplingParams

    params = SamplingParams(max_tokens=6, temperature=0, detokenize=False, logprobs=2)  # ... and decodes
    stacked_logits = llm.score(prompt)
    stacked = llm.generate([prompt], params)[0].outputs[0]
    previous = set_fused_projections(False)
    try:
        separate_logits = llm.score(prompt)
        separate = llm.generate([prompt], params)[0].outputs[0]
    finally:
        set_fused_projections(previous)
    torch.testing.assert_close(stacked_logits, separate_logits, **STACKED_VS_PARTS)
    assert stacked.token_ids == separate.token_ids
    for a, b in zip(stacked.logprobs, separate.logprobs):
        assert a.keys() == b.keys()
        torch.testing.assert_close(torch.tensor(list(a.values())), torch.tensor(list(b.values())),
                                   **STACKED_VS_PARTS)


def test_off_by_default_loads_and_runs_the_weights_apart(text_checkpoint):
    """Off (the default): no group buffers, every part its own tensor, one call per part."""
    previous = set_fused_projections(False)
    try:
        config = Qwen35Config.from_pretrained(text_checkpoint)
        weights, _ = load_weights(text_checkpoint, config, torch.float32)
        q, k = weights["layers.3.self_attn.q_proj.weight"], weights["layers.3.self_attn.k_proj.weight"]
        assert not same_storage(q, k)
        attention = FullAttention(config, 3, weights, None)
        assert attention.qkv.weight is None and attention.q_w is q
        x = torch.randn(2, config.hidden_size)
        for got, w in zip(attention.qkv(x), (q, k, weights["layers.3.self_attn.v_proj.weight"])):
            torch.testing.assert_close(got, F.linear(x, w), **STACKED_VS_PARTS)
    finally:
        set_fused_projections(previous)
