"""The shared enumeration of the ops' Triton launches (bench/toolchains/triton_launches.py), on the CPU.

The enumeration runs the ops' host code with its NPU or CUDA branches taken; these
tests check that it covers every kernel, that each target's choices are the ones
the host code makes (Ascend's fixed configs, CUDA's autotune lists) and that every
dot gets the explicit precision of ``_triton.dot_precision``.
"""
from __future__ import annotations

import pytest
import torch
import triton_launches

from qwen_ops.ops import _triton
from qwen_ops.ops.attention import triton_common

GDN_CHUNK_KERNELS = ("_chunk_prep_kernel", "_chunk_solve_kernel", "_chunk_wu_kernel", "_chunk_state_kernel")


@pytest.fixture(scope="module", params=triton_launches.TARGETS)
def launches(request):
    return request.param, triton_launches.enumerate_launches(request.param)


def test_every_kernel_the_ops_define_is_launched(launches):
    target, found = launches
    defined = {triton_launches.kernel_name(k) for k in triton_launches.kernels_defined()}
    assert len(defined) >= 16  # the GDN chunk's four launches included
    assert {launch.name for launch in found} == defined
    assert all(launch.target == target and launch.scenarios for launch in found)


def test_each_target_launches_with_its_own_configs(launches):
    target, found = launches
    for launch in found:
        if target == "npu":  # one fixed config, chosen on the host
            assert len(launch.configs) == 1, launch.describe()
        elif launch.kernel.cuda_configs:  # CUDA: the whole autotune list
            assert launch.configs == launch.kernel.cuda_configs, launch.describe()


def test_attention_takes_the_ascend_branches():
    """On an NPU the decode column tile is the largest whose double buffer fits the UB, per cache dtype."""
    decode = [launch for launch in triton_launches.enumerate_launches("npu", ["paged_decode_attention"])
              if launch.name == "_decode_kernel"]
    assert {launch.kwargs["INT8"] for launch in decode} == {False, True}
    for launch in decode:
        expected = triton_common.ascend_block_n(16, 256, 2, launch.kwargs["INT8"])
        assert launch.configs == [{"BLOCK_N": expected}], launch.describe()
    assert {launch.configs[0]["BLOCK_N"] for launch in decode} == {64, 16}  # the module doc's float/int8 tiles


def test_every_dot_gets_an_explicit_precision(launches):
    target, found = launches
    with_dots = [launch for launch in found if "DOT_PRECISION" in launch.kwargs]
    assert {launch.name for launch in with_dots} >= {"_decode_kernel", "_prefill_kernel", "_mixed_kernel",
                                                     "_gate_up_kernel", "_down_kernel", *GDN_CHUNK_KERNELS}
    for launch in with_dots:
        dtype = torch.bfloat16 if "*bfloat16" in launch.signature else torch.float16
        # The GDN chunk's inverse multiplies float32 blocks (its error reaches every w and u row).
        choose = _triton.float32_dot_precision if launch.name == "_chunk_solve_kernel" else _triton.dot_precision
        assert launch.kwargs["DOT_PRECISION"] == choose(target, dtype), launch.describe()


def test_gdn_chunk_inverse_precision_is_one_each_target_accepts(launches):
    """3xTF32 (tensor cores) on CUDA; IEEE on Ascend, one of the two triton-ascend's NPUOptions allow."""
    target, found = launches
    chosen = {launch.kwargs["DOT_PRECISION"] for launch in found if launch.name == "_chunk_solve_kernel"}
    assert chosen == ({"tf32x3"} if target == "cuda" else {"ieee"})


def test_dot_precision_per_target():
    assert _triton.dot_precision("cuda", torch.float32) == "ieee"
    assert _triton.dot_precision("npu", torch.bfloat16) == "ieee"  # triton-ascend allows "ieee" and "hf32" only
    assert _triton.dot_precision("interpreter", torch.float16) == "ieee"
    with pytest.raises(ValueError, match="kind"):
        _triton.dot_precision("rocm", torch.float16)
    with pytest.raises(ValueError, match="dtype"):
        _triton.dot_precision("cuda", torch.int8)


def test_float32_dot_precision_per_target():
    """float32 operands in a 16-bit model: tensor cores on CUDA, IEEE elsewhere; a float32 model: IEEE everywhere."""
    assert _triton.float32_dot_precision("cuda", torch.bfloat16) == "tf32x3"
    for kind in ("cuda", "npu", "interpreter"):
        assert _triton.float32_dot_precision(kind, torch.float32) == "ieee"
    assert _triton.float32_dot_precision("npu", torch.float16) == "ieee"
    assert _triton.float32_dot_precision("interpreter", torch.bfloat16) == "ieee"
    with pytest.raises(ValueError, match="kind"):
        _triton.float32_dot_precision("rocm", torch.float16)
    with pytest.raises(ValueError, match="model_dtype"):
        _triton.float32_dot_precision("cuda", torch.int8)


def test_recording_runs_nothing_and_ends():
    """Inside the recording the CPU is the target; afterwards it is the interpreter (or an error) again."""
    with _triton.recorded_launches("npu", 40) as recorded:
        assert _triton.target(torch.device("cpu")) == "npu"
        assert _triton.grid_size(torch.device("cpu"), 1000) == 40
    assert recorded == []
    with pytest.raises(ValueError, match="as_target"):
        with _triton.recorded_launches("interpreter", 3):
            pass
