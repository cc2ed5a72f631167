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
        ["g++", *HOST_FLAGS, *inc, "-c", str(HERE / "standin_main.cpp"), "-o", str(out / "main.o")],
        ["g++", *HOST_FLAGS, *inc, "-c", str(SIM / "runtime.cpp"), "-o", str(out / "runtime.o")],
    ]
    # The production kernels, compiled device-style for the symbol check (-O0: quick).
    for src in KERNEL_SOURCES:
        flags = [f if f != "-O1" else "-O0" for f in DEVICE_FLAGS]
        jobs.append(["g++", *flags, *inc, "-c", str(src), "-o", str(out / f"{src.stem}.kernel.o")])
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        list(pool.map(_compile, jobs))
    _compile(["g++", str(out / "main.o"), str(out / "kernels.o"), str(out / "runtime.o"), "-o",
              str(out / "standin_tests"), "-lpthread"])
    return out


def _run(build, mode):
    proc = subprocess.run([str(build / "standin_tests"), mode], capture_output=True, text=True, timeout=120)
    return proc


@pytest.fixture(scope="module")
def check_messages(build):
    proc = _run(build, "checks")
    assert proc.returncode == 0, proc.stderr
    found = {}
    for line in proc.stdout.splitlines():
        if line.startswith("CHECK "):
            name, secs, message = line[len("CHECK "):].split("|", 2)
            found[name] = (float(secs), message)
    return found


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
}


@pytest.mark.parametrize("case", sorted(STRICT_CHECKS))
def test_strict_check_fires(check_messages, case):
    secs, message = check_messages[case]
    for part in STRICT_CHECKS[case]:
        assert part in message, f"{case}: expected {part!r} in {message!r}"
    assert message.startswith(f"Ascend C stand-in: kernel {case}, block ")


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


KERNEL_HEADERS_ALLOWED = {"kernel_operator.h", "kernel_common.h", "kernel_conv.h", "tiling_common.h", "sim_types.h"}
# ...and the op's own tiling struct, "../op_host/<op>_tiling.h" from its kernel, "<op>_tiling.h" beside it.
OWN_TILING = re.compile(r"(\.\./op_host/)?\w+_tiling\.h")


def _device_sources():
    files = KERNEL_SOURCES + sorted(COMMON.glob("kernel_*.h")) + [COMMON / "tiling_common.h"] + TILING_HEADERS
    files += [SIM / "kernel_operator.h", SIM / "sim_types.h"]
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
