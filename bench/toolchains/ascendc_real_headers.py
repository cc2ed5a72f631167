"""Every Ascend C kernel through CANN's real API headers (the open asc-devkit), on a machine without CANN.

Each ``ops_ascendc/<op>/op_kernel/*.cpp`` is compiled with ``g++ -std=c++17
-fsyntax-only`` in CANN's CPU-debug mode (``-DASCENDC_CPU_DEBUG=1
-D__NPU_ARCH__=2201``, the 910B/C220 paths of the headers), once per core type
it runs on: ``-D__DAV_VEC__`` for the vector core (AIV), ``-D__DAV_CUBE__``
for the cube core (AIC). A kernel declared ``KERNEL_TYPE_MIX_AIC_*`` runs on
both, a ``KERNEL_TYPE_AIC_ONLY`` kernel on the AIC, every other kernel on the
AIV. Include order is CANN's: the devkit's include directories first (the
``asc_kernel_headers`` list of its ``impl/adv_api/gen_kernel_tiling.cmake``),
then the generated ``kernel_tiling/kernel_tiling.h``, then our replacement of
the five tikicpulib headers CPU-debug mode includes and the devkit lacks
(``ops_ascendc/toolchain_check/tikicpulib/``), and only then the op's own
(``ops_ascendc/common``). So a header of ours that a devkit header shadows, or
a name a devkit macro replaces, fails here as it would under CANN.

``kernel_tiling/kernel_tiling.h`` is generated at check time into a temporary
directory by the devkit's own ``impl/adv_api/cmake/scripts/gen_kernel_tiling_data_def.py``.

What it proves: every call, parameter struct and enumerator the kernels use
exists in the real API with a type that fits, and every template the kernels
instantiate type-checks in the real implementation headers. What it cannot:
the replacement tikicpulib declares the intrinsics as catch-alls, so their own
argument types are not checked; nothing is compiled to a binary (that needs
CANN's bisheng) and nothing runs.

Prints one line per kernel and core type (``ok`` or the first compiler
error), then ``ascendc real headers: K/N kernels compile``; exits 1 if any
fails. Without a devkit (``ASC_DEVKIT``, default ``../shared/asc-devkit``
from the repository root) or without g++ it prints why it skipped and exits 0.

    python bench/toolchains/ascendc_real_headers.py [--devkit DIR] [--ops-root DIR] [--jobs 2]
"""
from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import dataclasses
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DEFAULT_DEVKIT = REPO.parent / "shared" / "asc-devkit"
TIKICPULIB = REPO / "ops_ascendc" / "toolchain_check" / "tikicpulib"
TILING_SCRIPT = Path("impl/adv_api/cmake/scripts/gen_kernel_tiling_data_def.py")
# The devkit's kernel include directories, in the order of its asc_kernel_headers target.
DEVKIT_INCLUDE_DIRS = (".", "include", "include/basic_api", "include/simt_api", "impl", "impl/basic_api",
                       "impl/simt_api")
CPU_DEBUG_FLAGS = ("-std=c++17", "-fsyntax-only", "-DASCENDC_CPU_DEBUG=1", "-D__NPU_ARCH__=2201")
CORE_FLAGS = {"AIV": "-D__DAV_VEC__", "AIC": "-D__DAV_CUBE__"}
MAX_JOBS = 2  # the machines this runs on have two cores, shared
COMPILE_TIMEOUT_S = 600


@dataclasses.dataclass(frozen=True)
class Variant:
    kernel: str  # "<op>/<file stem>"
    source: Path
    core: str  # "AIV" or "AIC"


@dataclasses.dataclass(frozen=True)
class Result:
    variant: Variant
    ok: bool
    first_error: str


def core_types(source: Path) -> tuple[str, ...]:
    """The core types a kernel source runs on, from its KERNEL_TASK_TYPE_DEFAULT (comments left out)."""
    code = re.sub(r"//[^\n]*|/\*.*?\*/", "", source.read_text(), flags=re.S)
    kinds = set(re.findall(r"\bKERNEL_TASK_TYPE_DEFAULT\s*\(\s*KERNEL_TYPE_(\w+)\s*\)", code))
    if any(k.startswith("MIX_AIC_") for k in kinds):
        return ("AIV", "AIC")
    if "AIC_ONLY" in kinds:
        return ("AIC",)
    return ("AIV",)


def kernel_variants(ops_root: Path) -> list[Variant]:
    variants = []
    for source in sorted(ops_root.glob("*/op_kernel/*.cpp")):
        name = f"{source.parent.parent.name}/{source.stem}"
        variants += [Variant(name, source, core) for core in core_types(source)]
    return variants


def first_error(output: str) -> str:
    """The first compiler error of g++'s output (its whole line), else its last line."""
    lines = [l for l in output.splitlines() if l.strip()]
    for line in lines:
        if re.search(r"\b(fatal )?error:", line):
            return line.strip()
    return lines[-1].strip() if lines else "(no output)"


def compile_command(variant: Variant, devkit: Path, tiling_dir: Path, ops_root: Path, cxx: str) -> list[str]:
    includes = [devkit / d for d in DEVKIT_INCLUDE_DIRS] + [tiling_dir, TIKICPULIB, ops_root / "common"]
    return [cxx, *CPU_DEBUG_FLAGS, CORE_FLAGS[variant.core], *(f"-I{d}" for d in includes), str(variant.source)]


def check_variant(variant: Variant, devkit: Path, tiling_dir: Path, ops_root: Path, cxx: str) -> Result:
    cmd = compile_command(variant, devkit, tiling_dir, ops_root, cxx)
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=COMPILE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return Result(variant, False, f"g++ ran past {COMPILE_TIMEOUT_S} s")
    if proc.returncode == 0:
        return Result(variant, True, "")
    return Result(variant, False, first_error(proc.stderr + proc.stdout))


@contextlib.contextmanager
def generated_tiling_dir(devkit: Path):
    """A temporary include directory holding kernel_tiling/kernel_tiling.h, generated by the
    devkit's own script from its adv_api tiling definitions (devkit text: never kept in the project)."""
    with tempfile.TemporaryDirectory(prefix="qwen_asc_tiling_") as tmp:
        header = Path(tmp) / "kernel_tiling" / "kernel_tiling.h"
        proc = subprocess.run([sys.executable, str(devkit / TILING_SCRIPT), str(devkit / "include" / "adv_api"),
                               str(header)], capture_output=True, text=True)
        if proc.returncode != 0 or not header.is_file():
            raise RuntimeError(f"{TILING_SCRIPT} failed (exit {proc.returncode}): "
                               f"{first_error(proc.stderr + proc.stdout)}")
        yield Path(tmp)


def skip_reason(devkit: Path, cxx: str | None) -> str | None:
    if not (devkit / "include" / "kernel_operator.h").is_file():
        return f"no asc-devkit at {devkit} (no include/kernel_operator.h); set ASC_DEVKIT to CANN's asc-devkit"
    if not (devkit / TILING_SCRIPT).is_file():
        return f"the asc-devkit at {devkit} has no {TILING_SCRIPT}"
    if cxx is None:
        return "no g++ on PATH"
    return None


def run_check(devkit: Path, ops_root: Path, jobs: int = MAX_JOBS, out=sys.stdout) -> int:
    """Compile every kernel variant; print one line each and the summary. Returns the exit status."""
    cxx = shutil.which("g++")
    reason = skip_reason(devkit, cxx)
    if reason is not None:
        print(f"ascendc real headers: skipped ({reason})", file=out)
        return 0
    variants = kernel_variants(ops_root)
    if not variants:
        print(f"ascendc real headers: no kernel sources under {ops_root}/*/op_kernel/", file=out)
        return 1
    with generated_tiling_dir(devkit) as tiling_dir:
        with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, min(jobs, MAX_JOBS))) as pool:
            results = list(pool.map(lambda v: check_variant(v, devkit, tiling_dir, ops_root, cxx), variants))
    for r in results:
        v = r.variant
        print(f"{'ok  ' if r.ok else 'FAIL'}  {v.kernel} [{v.core}]" + ("" if r.ok else f": {r.first_error}"),
              file=out)
    kernels = sorted({r.variant.kernel for r in results})
    failed = {r.variant.kernel for r in results if not r.ok}
    cores = {c: sum(1 for r in results if r.variant.core == c) for c in CORE_FLAGS}
    print(f"ascendc real headers: {sum(r.ok for r in results)}/{len(results)} variants compile "
          f"({', '.join(f'{n} {c}' for c, n in cores.items())}) against {devkit}", file=out)
    print(f"ascendc real headers: {len(kernels) - len(failed)}/{len(kernels)} kernels compile", file=out)
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devkit", type=Path, default=Path(os.environ.get("ASC_DEVKIT", DEFAULT_DEVKIT)),
                        help="the asc-devkit (default: $ASC_DEVKIT, else ../shared/asc-devkit from the repo root)")
    parser.add_argument("--ops-root", type=Path, default=REPO / "ops_ascendc",
                        help="the folder holding <op>/op_kernel/*.cpp and common/ (default: ops_ascendc)")
    parser.add_argument("--jobs", type=int, default=MAX_JOBS, help=f"parallel g++ processes (at most {MAX_JOBS})")
    args = parser.parse_args(argv)
    return run_check(args.devkit.resolve(), args.ops_root.resolve(), args.jobs)


if __name__ == "__main__":
    sys.exit(main())
