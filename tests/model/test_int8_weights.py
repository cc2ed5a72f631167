"""INT8 projections in the engine: msModelSlim W8A8 / W8A8_DYNAMIC checkpoints and the weight-only mode.

The W8A8 checkpoints are made here from float ones by the tests' own quantizer (msmodelslim_checkpoint.py,
msModelSlim's layout). On the tiny default model each INT8 run is compared with the float32 run of the same
checkpoint: greedy tokens (16 of 16 agree) and the teacher-forced logprobs of one sequence
(INT8_MODEL_VS_FLOAT32_LOGPROB). The memory plan counts the INT8 weights at their size (the tensors the
engine holds are summed and compared). Every bad or missing scale is a ``WeightsError`` naming the tensor.
"""
from __future__ import annotations

import json
import os

import pytest
import torch
from float32_parity import assert_parity, default_dir, float32_run  # noqa: F401 (fixtures)
from msmodelslim_checkpoint import read_tensors, write_w8a8_checkpoint
from safetensors.torch import save_file
from tolerances import INT8_MODEL_VS_FLOAT32_LOGPROB

from qwen_ops import LLM
from qwen_ops.model.engine.engine_config import EngineConfig
from qwen_ops.model.engine.generate import main
from qwen_ops.model.loading.config import Qwen35Config
from qwen_ops.model.loading.quantization import Int8Weight
from qwen_ops.model.loading.weights import LM_HEAD, WeightsError, load_weights


@pytest.fixture(scope="module")
def w8a8_dirs(default_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("w8a8")
    return {"W8A8_DYNAMIC": write_w8a8_checkpoint(default_dir, str(root / "dynamic"), "W8A8_DYNAMIC"),
            "W8A8": write_w8a8_checkpoint(default_dir, str(root / "static"), "W8A8",
                                          calibration_ids=list(range(100, 164)), deq_scale_int64=True)}


def _int8_weights(llm) -> list[Int8Weight]:
    """Every Int8Weight the engine's model holds (its layers' attributes, a few levels down)."""
    found = []

    def walk(value, depth):
        if isinstance(value, Int8Weight):
            found.append(value)
        elif isinstance(value, (list, tuple)) and depth:
            for item in value:
                walk(item, depth - 1)
        elif depth and hasattr(value, "__dict__") and not isinstance(value, torch.Tensor):
            for item in vars(value).values():
                walk(item, depth - 1)
    walk(llm.llm_engine.model.layers, 4)
    return found


@pytest.mark.parametrize("scheme", ["W8A8_DYNAMIC", "W8A8"])
def test_w8a8_checkpoint_generates_like_float32(scheme, w8a8_dirs, float32_run):
    llm = LLM(w8a8_dirs[scheme], num_blocks=64)  # found by its quant_model_description.json
    weights = _int8_weights(llm)
    assert len(weights) == 31 and {w.scheme for w in weights} == {scheme}
    assert all(w.weight.dtype == torch.int8 for w in weights)
    assert f"int8 {scheme} (31 projections, quantization=ascend)" in llm.budget_summary()
    assert_parity(llm, float32_run, INT8_MODEL_VS_FLOAT32_LOGPROB[scheme], scheme)


def test_weight_only_mode_generates_like_float32(default_dir, float32_run):
    llm = LLM(default_dir, num_blocks=64, quantization="int8_weight_only")
    assert {w.scheme for w in _int8_weights(llm)} == {"W8A16"}
    assert_parity(llm, float32_run, INT8_MODEL_VS_FLOAT32_LOGPROB["W8A16"], "W8A16")


def _held_bytes(weights) -> int:
    total = 0
    for t in weights.values():
        parts = [t.weight, t.weight_scale, t.input_scale, t.input_offset, t.quant_bias] \
            if isinstance(t, Int8Weight) else [t]
        total += sum(p.numel() * p.element_size() for p in parts if p is not None)
    return total


@pytest.mark.parametrize("which", ["W8A8_DYNAMIC", "W8A8", "int8_weight_only"])
def test_memory_plan_counts_the_int8_weights(which, w8a8_dirs, default_dir, float32_run):
    model, quantization = (default_dir, which) if which == "int8_weight_only" else (w8a8_dirs[which], None)
    config = EngineConfig.from_args(model, num_blocks=64, quantization=quantization)
    weights, _ = load_weights(model, config.config, torch.float32, "cpu", config.quantization)
    assert config.weight_bytes == _held_bytes(weights)
    float_bytes = float32_run[3].weight_bytes
    int8 = {n: t for n, t in weights.items() if isinstance(t, Int8Weight)}
    # "int8_weight_only" quantizes the lm_head too; with tied embeddings that is an INT8 copy beside the float
    # embedding (which the lookups read), so it adds what it holds instead of saving.
    head = int8.pop(LM_HEAD, None)
    assert (head is not None) == (which == "int8_weight_only")
    assert len(int8) == 31
    extra = 0
    if head is not None:
        assert head.shape == weights["embed_tokens.weight"].shape
        tied = config.config.tie_word_embeddings
        extra = _held_bytes({LM_HEAD: head}) - (0 if tied else 4 * head.weight.numel())
    # Each INT8 projection saves its float32 bytes less what it holds (int8 weight, scales, quant_bias).
    assert float_bytes - config.weight_bytes == \
        sum(4 * t.weight.numel() for t in int8.values()) - _held_bytes(int8) - extra
    assert f"({config.weight_bytes / 2**20:.1f} MiB)" in config.describe()


def test_qwen_generate_flag(default_dir, w8a8_dirs, capsys):
    for args in (["--model", default_dir, "--quantization", "int8_weight_only"],
                 ["--model", w8a8_dirs["W8A8_DYNAMIC"], "--quantization", "ascend"]):
        assert main(args + ["--prompt", "Hi", "--max-tokens", "3", "--temperature", "0", "--num-blocks", "32"]) == 0
        err = capsys.readouterr().err
        assert "+int8 " in err, err


def test_quantization_argument_errors(default_dir, w8a8_dirs):
    with pytest.raises(ValueError, match="quantization"):
        EngineConfig.from_args(default_dir, quantization="int4")
    with pytest.raises(ValueError, match="quant_model_description.json"):
        EngineConfig.from_args(default_dir, quantization="ascend")
    with pytest.raises(ValueError, match="already quantized"):
        EngineConfig.from_args(w8a8_dirs["W8A8"], quantization="int8_weight_only")


# ----------------------------------------------------------------------------- bad checkpoints

Q = "model.layers.3.self_attn.q_proj"  # the tiny text checkpoint's attention layer
G = "model.layers.0.linear_attn.in_proj_qkv"


@pytest.fixture(scope="module")
def static_tiny(text_checkpoint, tmp_path_factory):
    return write_w8a8_checkpoint(text_checkpoint, str(tmp_path_factory.mktemp("tiny_w8a8")), "W8A8")


def _corrupt(src, dst, edit, description_edit=None):
    tensors = read_tensors(src)
    edit(tensors)
    os.makedirs(dst, exist_ok=True)
    for entry in os.listdir(src):
        if entry != "model.safetensors":
            with open(os.path.join(src, entry), "rb") as f, open(os.path.join(dst, entry), "wb") as g:
                g.write(f.read())
    save_file(tensors, os.path.join(dst, "model.safetensors"))
    if description_edit is not None:
        path = os.path.join(dst, "quant_model_description.json")
        with open(path) as f:
            description = json.load(f)
        description_edit(description)
        with open(path, "w") as f:
            json.dump(description, f)
    return dst


def _set(name, value):
    return lambda t: t.__setitem__(name, value)


def _scaled(name, factor):
    return lambda t: t.__setitem__(name, t[name] * factor)


CORRUPTIONS = {
    "missing weight_scale": (lambda t: t.pop(f"{G}.weight_scale"), None, f"{G}.weight_scale"),
    "NaN weight_scale": (lambda t: t[f"{Q}.weight_scale"].__setitem__(0, float("nan")), None, f"{Q}.weight_scale"),
    "zero weight_scale": (lambda t: t[f"{Q}.weight_scale"].__setitem__(1, 0.0), None, f"{Q}.weight_scale"),
    "weight_scale shape": (lambda t: t.__setitem__(f"{Q}.weight_scale", t[f"{Q}.weight_scale"][:-1].clone()), None,
                           f"{Q}.weight_scale"),
    "nonzero weight_offset": (lambda t: t[f"{Q}.weight_offset"].__setitem__(2, 1.0), None, f"{Q}.weight_offset"),
    "missing deq_scale": (lambda t: t.pop(f"{Q}.deq_scale"), None, f"{Q}.deq_scale"),
    "wrong deq_scale": (_scaled(f"{Q}.deq_scale", 2.0), None, f"{Q}.deq_scale"),
    "infinite input_scale": (lambda t: t[f"{G}.input_scale"].fill_(float("inf")), None, f"{G}.input_scale"),
    "fractional input_offset": (lambda t: t[f"{G}.input_offset"].add_(0.5), None, f"{G}.input_offset"),
    "missing quant_bias": (lambda t: t.pop(f"{Q}.quant_bias"), None, f"{Q}.quant_bias"),
    "float weight marked W8A8": (lambda t: t.__setitem__(f"{Q}.weight", t[f"{Q}.weight"].float()), None,
                                 f"{Q}.weight"),
    "router-like tensor marked": (lambda t: None, lambda d: d.__setitem__("model.embed_tokens.weight", "W8A8"),
                                  "model.embed_tokens.weight"),
    "unknown scheme": (lambda t: None, lambda d: d.__setitem__(f"{Q}.weight", "W4A8"), f"{Q}.weight"),
}


@pytest.mark.parametrize("case", sorted(CORRUPTIONS))
def test_bad_or_missing_scales_name_the_tensor(case, static_tiny, tmp_path):
    edit, description_edit, name = CORRUPTIONS[case]
    bad = _corrupt(static_tiny, str(tmp_path / "bad"), edit, description_edit)
    config = Qwen35Config.from_pretrained(bad)
    with pytest.raises(WeightsError, match=repr(name).replace(".", r"\.")):
        load_weights(bad, config, torch.float32)


def test_the_untouched_tiny_checkpoint_loads(static_tiny):
    """The corruption tests' base checkpoint itself loads (so each failure above is its corruption's)."""
    weights, _ = load_weights(static_tiny, Qwen35Config.from_pretrained(static_tiny), torch.float32)
    assert isinstance(weights["layers.3.self_attn.q_proj.weight"], Int8Weight)


@pytest.mark.parametrize("rows", [1, 4, 5, 64, 65, 256, 257])
def test_weight_only_projection_at_every_row_count(rows):
    """Up to WEIGHT_ONLY_KERNEL_MAX_ROWS rows the INT8 kernel, past them the dequantized float path: both the
    reference's product (the kernel's float32 sums or F.linear's, INT8_WEIGHT_ONLY_VS_REFERENCE)."""
    from tolerances import INT8_WEIGHT_ONLY_VS_REFERENCE, tol

    from qwen_ops.model.loading.quantization import weight_only_int8
    from qwen_ops.model.network.layers import linear
    from qwen_ops.ops.int8_linear.reference import int8_linear_reference

    g = torch.Generator().manual_seed(rows)
    w = weight_only_int8(torch.randn(48, 96, generator=g) / 96 ** 0.5)
    x = torch.randn(rows, 96, generator=g)
    out = linear(x, w)
    assert out.shape == (rows, 48) and out.dtype == torch.float32
    torch.testing.assert_close(out, int8_linear_reference(x, w.weight, w.weight_scale),
                               **tol(INT8_WEIGHT_ONLY_VS_REFERENCE, torch.float32))
