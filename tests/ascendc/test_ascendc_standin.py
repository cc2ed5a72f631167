"""The CPU stand-in for the Ascend C API, tested on its own.

A small C++ program (``standin/``) is compiled here with g++: its kernels are
built device-style, exactly as ``ops_ascendc/<op>/op_kernel`` are, against
``ops_ascendc/sim``. Each strict check must stop a small bad kernel with a
message naming the call; each vector operation must match a plain C++
computation bit for bit (half arithmetic against GCC's ``_Float16``). The
kernel sources are also checked to be device code: only our own headers, no
exceptions, RTTI, standard library or dynamic allocation.
"""
from __future__ import annotations

import concurrent.futures
import pathlib
import re
import shutil
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
SIM = ROOT / "ops_ascendc" / "sim"
COMMON = ROOT / "ops_ascendc" / "common"
# Each op's folder: op_kernel/ (device code) and op_host/ (its tiling struct and planner).
KERNEL_SOURCES = sorted((ROOT / "ops_ascendc").glob("*/op_kernel/*.cpp"))
TILING_HEADERS = sorted((ROOT / "ops_ascendc").glob("*/op_host/*_tiling.h"))
# Kernel classes shared between ops (paged_decode_attention's and prefill_attention's, used by mixed_attention).
KERNEL_CLASS_HEADERS = sorted((ROOT / "ops_ascendc").glob("*/op_kernel/*_kernel.h"))
HERE = pathlib.Path(__file__).resolve().parent / "standin"

DEVICE_FLAGS = ["-std=c++17", "-O1", "-nostdinc", "-nostdinc++", "-fno-exceptions", "-fno-rtti",
                "-fasynchronous-unwind-tables", "-Wall", "-Wextra", "-Werror", "-Wno-unused-parameter",
                "-Wno-unused-variable", "-Wno-unused-but-set-variable"]
HOST_FLAGS = ["-std=c++17", "-O1"]

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++ to build the stand-in tests")


def _compile(args):
    proc = subprocess.run(args, capture_output=True, text=True)
    if proc.returncode != 0:
        raise AssertionError(f"compilation failed: {' '.join(map(str, args))}\n{proc.stderr[-4000:]}")


@pytest.fixture(scope="module")
def build(tmp_path_factory):
    out = tmp_path_factory.mktemp("standin")
    inc = [f"-I{SIM}", f"-I{COMMON}"]
    jobs = [
        ["g++", *DEVICE_FLAGS, *inc, "-c", str(HERE / "standin_kernels.cpp"), "-o", str(out / "kernels.o")],
        ["g++", *DEVICE_FLAGS, *inc, "-c", str(HERE / "standin_cube_kernels.cpp"), "-o", str(out / "cube_kernels.o")],
        ["g++", *HOST_FLAGS, *inc, "-c", str(HERE / "standin_main.cpp"), "-o", str(out / "main.o")],
        ["g++", *HOST_FLAGS, *inc, "-c", str(HERE / "standin_cube_main.cpp"), "-o", str(out / "cube_main.o")],
        ["g++", *HOST_FLAGS, *inc, "-c", str(SIM / "runtime.cpp"), "-o", str(out / "runtime.o")],
    ]
    # The production kernels, compiled device-style for the symbol check (-O0: quick).
    for src in KERNEL_SOURCES:
        flags = [f if f != "-O1" else "-O0" for f in DEVICE_FLAGS]
        jobs.append(["g++", *flags, *inc, "-c", str(src), "-o", str(out / f"{src.stem}.kernel.o")])
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        list(pool.map(_compile, jobs))
    _compile(["g++", str(out / "main.o"), str(out / "cube_main.o"), str(out / "kernels.o"),
              str(out / "cube_kernels.o"), str(out / "runtime.o"), "-o", str(out / "standin_tests"), "-lpthread"])
    return out


def _run(build, mode):
    proc = subprocess.run([str(build / "standin_tests"), mode], capture_output=True, text=True, timeout=120)
    return proc


def _checks(build, mode):
    proc = _run(build, mode)
    assert proc.returncode == 0, proc.stderr
    found = {}
    for line in proc.stdout.splitlines():
        if line.startswith("CHECK "):
            name, secs, message = line[len("CHECK "):].split("|", 2)
            found[name] = (float(secs), message)
    return found


@pytest.fixture(scope="module")
def check_messages(build):
    return _checks(build, "checks")


@pytest.fixture(scope="module")
def cube_messages(build):
    return _checks(build, "cube-checks")


# bad kernel -> substrings its message must contain (the call it names first)
STRICT_CHECKS = {
    "ub_overflow": ["AscendC::TPipe::InitBuffer", "unified buffer overflow", "188416"],
    "datacopy_len": ["AscendC::DataCopy:", "28 bytes is not a multiple of 32"],
    "vec_unaligned": ["AscendC::Add:", "not 32-byte aligned"],
    "datacopy_unaligned_ub": ["AscendC::DataCopy:", "not 32-byte aligned"],
    "pad_blocklen_units": ["AscendC::DataCopyPad:", "blockLen 6 bytes"],
    "pad_overrun": ["AscendC::DataCopyPad:", "80 elements requested"],
    "alloc_past_depth": ["AscendC::TQue::AllocTensor:", "all 2 buffers"],
    "deque_empty": ["AscendC::TQue::DeQue:", "empty queue"],
    "enque_past_depth": ["AscendC::TQue::EnQue:", "depth=1"],
    "use_after_free": ["AscendC::Muls:", "after FreeTensor"],
    "double_free": ["AscendC::TQue::FreeTensor:", "twice"],
    "touch_enqueued": ["AscendC::Duplicate:", "enqueued"],
    "repeat_overflow": ["AscendC::Muls:", "repeatTime 300", "8-bit"],
    "mask_too_big": ["AscendC::Add:", "mask 128"],
    "cast_int8_float": ["AscendC::Cast:", "int8_t -> float", "half"],
    "cast_float_int8": ["AscendC::Cast:", "float -> int8_t"],
    "cast_bad_mode": ["AscendC::Cast:", "round mode CAST_RINT"],
    "gm_out_of_bounds": ["AscendC::GlobalTensor::GetValue:", "outside every buffer"],
    "gm_readonly": ["AscendC::GlobalTensor::SetValue:", "read-only input 'in'"],
    "global_size": ["AscendC::DataCopy:", "GlobalTensor of 8 elements"],
    "count_past_tensor": ["AscendC::Exp:", "72 elements requested"],
    "reduce_work_small": ["AscendC::ReduceSum:", "workLocal"],
    "partial_overlap": ["AscendC::Adds:", "partially overlaps"],
    "tbuf_too_big": ["AscendC::TBuf::Get:", "257 elements"],
    "second_pipe": ["AscendC::TPipe::TPipe:", "second TPipe"],
    "abort_others": ["block 2 of 4", "AscendC::Exp:"],
    # DataCopy out to GM and within the unified buffer (issue 9, item 8)
    "datacopy_out_len": ["AscendC::DataCopy:", "UB->GM length 28 bytes is not a multiple of 32"],
    "datacopy_out_unaligned": ["AscendC::DataCopy:", "src starts at unified-buffer byte 16, not 32-byte aligned"],
    "datacopy_out_overrun": ["AscendC::DataCopy:", "src: 128 elements requested but the tensor holds 64"],
    "datacopy_ub_len": ["AscendC::DataCopy:", "UB->UB length 28 bytes is not a multiple of 32"],
    "datacopy_ub_unaligned": ["AscendC::DataCopy:", "dst starts at unified-buffer byte 528, not 32-byte aligned"],
    "datacopy_params_out_overrun": ["AscendC::DataCopy:", "src: 88 elements requested but the tensor holds 64"],
    "datacopy_params_out_empty": ["AscendC::DataCopy:", "blockLen 0"],
}


@pytest.mark.parametrize("case", sorted(STRICT_CHECKS))
def test_strict_check_fires(check_messages, case):
    secs, message = check_messages[case]
    for part in STRICT_CHECKS[case]:
        assert part in message, f"{case}: expected {part!r} in {message!r}"
    assert message.startswith(f"Ascend C stand-in: kernel {case}, block ")


# Cube side and mixed kernels (standin_cube_kernels.cpp): bad kernel -> substrings
# of its message. "AIC block"/"AIV block" name the core type in cube and mixed launches.
CUBE_CHECKS = {
    # memories and positions
    "l1_overflow": ["AIC block 0 of 1", "AscendC::TPipe::InitBuffer:", "L1 overflow", "524288 bytes"],
    "l0a_overflow": ["AscendC::TPipe::InitBuffer:", "L0A overflow", "66048 more bytes", "65536 bytes"],
    "l0c_overflow": ["AscendC::TPipe::InitBuffer:", "L0C overflow", "131072 bytes"],
    "ub_on_aic": ["AscendC::TPipe::InitBuffer:", "TPosition::VECIN", "cube core (AIC) does not have"],
    "l1_on_aiv": ["AscendC::TPipe::InitBuffer:", "TPosition::A1", "vector core (AIV) does not have"],
    "vector_op_on_l1": ["AscendC::Adds:", "in L1 (TPosition::A1)", "unified buffer only"],
    # GM -> L1
    "nd2nz_c0stride": ["AscendC::DataCopy:", "dstNzC0Stride 20", "rounded up to 16 (32)"],
    "nd2nz_src_pitch": ["AscendC::DataCopy:", "srcDValue 16", "less than dValue 32"],
    "nd2nz_empty": ["AscendC::DataCopy:", "Nd2NzParams.dValue 0"],
    "position_c1": ["AscendC::TPipe::InitBuffer:", "TPosition::C1 is not modelled"],
    "nd2nz_to_ub": ["AscendC::DataCopy:", "Nd2NzParams copies GM into L1"],
    "nd2nz_overrun": ["AscendC::DataCopy:", "2048 elements requested", "holds 1024"],
    # L1 -> L0A/L0B
    "loaddata_repeat": ["AscendC::LoadData:", "repeatTimes 256 outside 1..255"],
    "loaddata_transpose_b8": ["AscendC::LoadData:", "16-bit types only", "LoadDataWithTranspose"],
    "transpose_overlap": ["AscendC::LoadDataWithTranspose:", "destination fractals overlap", "dstGap 0, dstFracGap 0"],
    "transpose_from_ub": ["AscendC::LoadDataWithTranspose:", "src is in the unified buffer"],
    "loaddata_src_l0a": ["AscendC::LoadData:", "src is in L0A (TPosition::A2)", "moves L1"],
    "loaddata_to_l0c": ["AscendC::LoadData:", "L0C (TPosition::CO1)", "L0A (A2) or L0B (B2)"],
    "loaddata_dst_align": ["AscendC::LoadData:", "byte 256 of L0A, not 512-byte aligned"],
    # Mmad
    "mmad_half_out": ["AscendC::Mmad:", "half x half -> half is not a cube data type pair"],
    "mmad_mixed_types": ["AscendC::Mmad:", "half x bfloat16_t -> float"],
    "mmad_m1": ["AscendC::Mmad:", "m = 1", "GEMV"],
    "mmad_k_range": ["AscendC::Mmad:", "32, 32, 4096", "1..4095"],
    "mmad_swapped": ["AscendC::Mmad:", "fm (A) is in L0B", "reads A from L0A"],
    "mmad_dst_align": ["AscendC::Mmad:", "byte 256 of L0C, not 1024-byte aligned"],
    "mmad_l0_too_small": ["AscendC::Mmad:", "fm (A): 1536 elements requested"],
    "mmad_bias": ["AscendC::Mmad:", "cmatrixSource", "not modelled"],
    "mmad_unitflag": ["AscendC::Mmad:", "unitFlag 1"],
    # Fixpipe
    "fixpipe_quant_mismatch": ["AscendC::Fixpipe:", "quantPre NoQuant does not convert float to half", "F322F16"],
    "fixpipe_bad_pair": ["AscendC::Fixpipe:", "L0C float -> GM int8_t is not a conversion the stand-in models"],
    "fixpipe_nz_out": ["AscendC::Fixpipe:", "only the NZ->ND conversion (CFG_ROW_MAJOR"],
    "fixpipe_ndnum": ["AscendC::Fixpipe:", "ndNum 2"],
    "fixpipe_src_stride": ["AscendC::Fixpipe:", "srcStride 20", "rounded up to 16 (32)"],
    "fixpipe_dst_stride": ["AscendC::Fixpipe:", "dstStride 0"],
    "fixpipe_to_local": ["AscendC::Fixpipe:", "to a LocalTensor", "L0C to GM only"],
    "fixpipe_unwritten": ["AscendC::Fixpipe:", "no Mmad has written"],
    "fixpipe_unitflag_mismatch": ["AscendC::Fixpipe:", "unitFlag 0 does not match the last Mmad's unitFlag 3"],
    "fixpipe_unitflag_not_final": ["AscendC::Fixpipe:", "had unitFlag 2"],
    "fixpipe_gm_overrun": ["AscendC::Fixpipe:", "GlobalTensor of 496 elements"],
    # mixed kernels: kernel type, flags, barriers
    "kernel_type_mismatch": ["AscendC::KERNEL_TASK_TYPE_DEFAULT:", "declares KERNEL_TYPE_MIX_AIC_1_2",
                             "launched as KERNEL_TYPE_AIC_ONLY"],
    "flag_in_vector_kernel": ["AscendC::CrossCoreSetFlag:", "KERNEL_TYPE_MIX_AIC_1_2", "KERNEL_TYPE_AIV_ONLY"],
    "flag_pipe_s": ["AIC block 0 of 1", "AscendC::CrossCoreSetFlag:", "pipe PIPE_S"],
    # Both AIVs wait on the bad id; whichever thread gets there first is the one reported.
    "flag_id_range": ["AIV block ", " of 2", "AscendC::CrossCoreWaitFlag:", "flag id 16 outside 0..15"],
    "flag_mode": ["AscendC::CrossCoreSetFlag:", "mode 0 is not modelled"],
    "flag_saturation": ["AscendC::CrossCoreSetFlag:", "flag 4 towards AIV block 0", "saturates at 15"],
    "deadlock": ["AscendC::CrossCoreWaitFlag:", "waits on flag 3", "deadlock", "AIC block 0: finished"],
    "aic_waits_one_aiv": ["AIC block 0 of 1", "AscendC::CrossCoreWaitFlag:", "each of its two AIVs", "deadlock"],
    "syncall_missing": ["AscendC::SyncAll:", "deadlock", "AIV block 1: finished"],
    "syncall_false_in_vector_kernel": ["block 0 of 1: AscendC::SyncAll:", "vector-only kernel calls SyncAll()"],
    "syncall_default_on_aic": ["AscendC::SyncAll:", "SyncAll<false>()"],
}
# Unordered GM hand-offs: whichever access comes second on the threads is reported.
CUBE_RACES = ["race_read_before_wait", "race_ring_overwrite"]


def test_cross_core_write_write_is_reported(cube_messages):
    """Two cores writing one GM word unordered (40 runs, every one reported, whichever writes second)."""
    secs, message = cube_messages["race_write_write"]
    assert message.startswith("Ascend C stand-in: kernel race_write_write, ")
    assert "AscendC::GlobalTensor::SetValue: writes GM bytes 32.. of 'ws' that" in message
    assert "wrote, without a CrossCoreWaitFlag or SyncAll" in message


@pytest.mark.parametrize("case", sorted(CUBE_CHECKS))
def test_cube_strict_check_fires(cube_messages, case):
    secs, message = cube_messages[case]
    for part in CUBE_CHECKS[case]:
        assert part in message, f"{case}: expected {part!r} in {message!r}"
    assert message.startswith(f"Ascend C stand-in: kernel {case}, ")


@pytest.mark.parametrize("case", CUBE_RACES)
def test_cross_core_race_is_reported(cube_messages, case):
    """Run 40 times (any interleaving of the threads): every run reports the race, naming kernel, core and call."""
    secs, message = cube_messages[case]
    assert message, f"{case}: at least one run went unreported"
    assert message.startswith(f"Ascend C stand-in: kernel {case}, ")
    assert "a race between cores" in message
    read = re.search(r"AIV block \d of 2: AscendC::GlobalTensor::GetValue: reads GM bytes 0\.\. of 'ws' that AIC "
                     r"block 0 wrote", message)
    write = re.search(r"AIC block 0 of 1: AscendC::GlobalTensor::SetValue: writes GM bytes 0\.\. of 'ws' that AIV "
                      r"block \d read", message)
    assert read or write, message


def test_race_is_reported_pages_into_a_large_buffer(cube_messages):
    """The race shadow is allocated page by page (4096 entries of 4 bytes): a race on page 3 of a 64 KiB buffer
    is reported at its own bytes, and writes one page apart by different cores are not mistaken for one."""
    message = cube_messages["race_write_write_far"][1]
    assert "AscendC::GlobalTensor::SetValue: writes GM bytes 49156.. of 'ws' that" in message
    assert cube_messages["mix_far_pages"][1] == ""


def test_clean_mixed_kernels_pass(cube_messages):
    assert cube_messages["mix_ids"][1] == "", "AIC/AIV block and sub-block ids of a 1:2 mixed launch"
    assert cube_messages["syncall_orders"][1] == "", "SyncAll<false> orders every core's writes before the reads"


def test_cube_operations_match_plain_cpp(build):
    """Each cube data path bit for bit against fp32 accumulation in k order (and the mixed hand-off)."""
    proc = _run(build, "cube-ops")
    lines = proc.stdout.splitlines()
    failed = [l for l in lines if l.startswith("FAIL")]
    passed = [l for l in lines if l.startswith("PASS")]
    assert not failed, "\n".join(failed)
    assert proc.returncode == 0
    assert len(passed) == 11, proc.stdout


def test_clean_kernels_pass(check_messages):
    assert check_messages["ub_exact_ok"][1] == "", "184 KB exactly must fit"
    assert check_messages["block_ids"][1] == "", "each block sees its own index and the block count"


def test_failure_stops_other_blocks(check_messages):
    # The other three blocks would loop 2e9 times; they must stop at their next API call.
    assert check_messages["abort_others"][0] < 20.0


def test_operations_match_plain_cpp(build):
    proc = _run(build, "ops")
    lines = proc.stdout.splitlines()
    failed = [l for l in lines if l.startswith("FAIL")]
    passed = [l for l in lines if l.startswith("PASS")]
    assert not failed, "\n".join(failed)
    assert proc.returncode == 0
    assert len(passed) >= 40, proc.stdout


def test_kernel_objects_use_no_runtime_support(build):
    """No operator new/delete, malloc, exceptions, RTTI or libstdc++ in the kernels' objects."""
    nm = shutil.which("nm")
    if nm is None:
        pytest.skip("needs nm")
    forbidden = re.compile(r"(_Znw|_Zna|_Zdl|_Zda|\bmalloc\b|\bcalloc\b|\brealloc\b|\bfree\b|__cxa_throw|"
                           r"__cxa_begin_catch|__cxa_allocate_exception|__gxx_personality|_ZTI|_ZTS|_ZNSt|_ZSt)")
    objects = sorted(build.glob("*.kernel.o"))
    assert len(objects) == len(KERNEL_SOURCES) >= 4
    for obj in objects:
        undefined = subprocess.run([nm, "-u", str(obj)], capture_output=True, text=True, check=True).stdout
        bad = [l for l in undefined.splitlines() if forbidden.search(l)]
        assert not bad, f"{obj.name} needs host runtime support: {bad}"


KERNEL_HEADERS_ALLOWED = {"kernel_operator.h", "kernel_operator_cube.h", "kernel_operator_mix.h", "qwen_kernel_common.h",
                          "qwen_kernel_conv.h", "qwen_tiling_common.h", "sim_types.h"}
# ...and the op's own tiling struct, "../op_host/<op>_tiling.h" from its kernel, "<op>_tiling.h" beside it;
# its kernel class "<op>_kernel.h"; or another op's tiling or kernel class, "../../<op>/op_host|op_kernel/...".
OWN_TILING = re.compile(r"((\.\./)?\.\./(\w+/)?op_(host|kernel)/)?\w+_(tiling|kernel)\.h")


def _device_sources():
    files = KERNEL_SOURCES + KERNEL_CLASS_HEADERS + sorted(COMMON.glob("qwen_kernel_*.h")) + [COMMON / "qwen_tiling_common.h"]
    files += TILING_HEADERS
    files += [SIM / "kernel_operator.h", SIM / "kernel_operator_cube.h", SIM / "kernel_operator_mix.h", SIM / "sim_types.h"]
    return files


@pytest.mark.parametrize("path", _device_sources(), ids=lambda p: p.name)
def test_device_sources_are_device_style(path):
    text = path.read_text()
    code = re.sub(r"//[^\n]*", "", text)  # comments may mention anything
    includes = re.findall(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]', code, flags=re.M)
    for kind, name in includes:
        assert kind == '"', f"{path.name} includes a system header <{name}>"
        assert name in KERNEL_HEADERS_ALLOWED or OWN_TILING.fullmatch(name), \
            f"{path.name} includes {name!r}, not one of the kernels' own headers"
    for pattern, what in ((r"\bstd::", "the standard library"), (r"\bnew\s+[A-Za-z_(]", "dynamic allocation"),
                          (r"\bdelete\b", "dynamic deallocation"), (r"\bmalloc\s*\(", "malloc"),
                          (r"\bthrow\b|\btry\s*\{|\bcatch\s*\(", "exceptions"),
                          (r"\btypeid\b|\bdynamic_cast\b", "RTTI")):
        assert not re.search(pattern, code), f"{path.name} uses {what}"
