"""The Ascend C kernels against CANN's real API headers (bench/toolchains/ascendc_real_headers.py).

The real check needs the asc-devkit (``ASC_DEVKIT``, default ``../shared/asc-devkit``
from the repository root) and is skipped with that reason without it. The
check's own reporting (one line per kernel and core type, the first compiler
error, the summary, the exit status, the skip) is tested everywhere, on a
small fake devkit and kernels written here.
"""
from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "bench" / "toolchains" / "ascendc_real_headers.py"
FIELD_TYPES = REPO / "ops_ascendc" / "toolchain_check" / "param_struct_field_types.cpp"
SIM = REPO / "ops_ascendc" / "sim"

spec = importlib.util.spec_from_file_location("ascendc_real_headers", SCRIPT)
check = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = check  # its dataclasses look their module up
spec.loader.exec_module(check)

DEVKIT = Path(os.environ.get("ASC_DEVKIT", check.DEFAULT_DEVKIT)).resolve()
needs_devkit = pytest.mark.skipif(
    check.skip_reason(DEVKIT, shutil.which("g++")) is not None,
    reason=f"real-headers check unavailable: {check.skip_reason(DEVKIT, shutil.which('g++'))}")
needs_gxx = pytest.mark.skipif(shutil.which("g++") is None, reason="no g++ on PATH")


def run_script(*args: str, devkit: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, ASC_DEVKIT=str(devkit))
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, env=env,
                          timeout=900)


def test_core_types_of_the_real_kernels():
    """The mixed kernels (KERNEL_TYPE_MIX_AIC_1_2) are checked as AIV and AIC, the others as AIV."""
    variants = check.kernel_variants(REPO / "ops_ascendc")
    sources = sorted(REPO.glob("ops_ascendc/*/op_kernel/*.cpp"))
    assert {v.source for v in variants} == set(sources) and len(sources) >= 9
    aic = {v.kernel for v in variants if v.core == "AIC"}
    assert aic == {"chunk_gated_delta_rule/chunk_gated_delta_rule", "fused_experts/fused_experts",
                   "mixed_attention/mixed_attention", "prefill_attention/prefill_attention"}
    assert len(variants) == len(sources) + len(aic)


@pytest.mark.slow
def test_every_kernel_compiles_against_the_real_headers(toolchain_summary):
    reason = check.skip_reason(DEVKIT, shutil.which("g++"))
    if reason is not None:
        toolchain_summary(f"ascendc real headers: SKIPPED: {reason}")
        pytest.skip(f"real-headers check unavailable: {reason}")
    proc = run_script(devkit=DEVKIT)
    lines = proc.stdout.strip().splitlines()
    toolchain_summary(lines[-1] if lines else f"ascendc real headers: no output (exit {proc.returncode})")
    n = len(list(REPO.glob("ops_ascendc/*/op_kernel/*.cpp")))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert lines[-1] == f"ascendc real headers: {n}/{n} kernels compile"
    variant_lines = [l for l in lines if l.startswith(("ok ", "FAIL "))]
    assert len(variant_lines) == len(check.kernel_variants(REPO / "ops_ascendc"))
    assert all(l.startswith("ok ") for l in variant_lines), proc.stdout


@needs_gxx
def test_param_struct_field_types_match_the_standin():
    """The stand-in's parameter structs have the field types of the real API (the list the real headers pass)."""
    proc = subprocess.run(["g++", "-std=c++17", "-fsyntax-only", f"-I{SIM}", str(FIELD_TYPES)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, check.first_error(proc.stderr)


@needs_devkit
def test_param_struct_field_types_match_the_real_headers():
    with check.generated_tiling_dir(DEVKIT) as tiling_dir:
        for core in check.CORE_FLAGS:
            variant = check.Variant("toolchain_check/param_struct_field_types", FIELD_TYPES, core)
            result = check.check_variant(variant, DEVKIT, tiling_dir, REPO / "ops_ascendc", "g++")
            assert result.ok, result.first_error


def _fake_devkit(root: Path) -> Path:
    """A devkit with the layout the check looks for: a kernel_operator.h and a tiling script."""
    (root / "include").mkdir(parents=True)
    (root / "include" / "kernel_operator.h").write_text("#define QWEN_FAKE_DEVKIT 1\n")
    script = root / check.TILING_SCRIPT
    script.parent.mkdir(parents=True)
    script.write_text("import pathlib, sys\np = pathlib.Path(sys.argv[2])\np.parent.mkdir(parents=True, "
                      "exist_ok=True)\np.write_text('#define QWEN_FAKE_TILING 1\\n')\n")
    return root


def _kernel(ops_root: Path, op: str, body: str) -> None:
    d = ops_root / op / "op_kernel"
    d.mkdir(parents=True)
    (d / f"{op}.cpp").write_text(textwrap.dedent(body))


@needs_gxx
def test_a_broken_kernel_is_named_with_its_first_error(tmp_path):
    devkit = _fake_devkit(tmp_path / "devkit")
    ops = tmp_path / "ops"
    (ops / "common").mkdir(parents=True)
    _kernel(ops, "good", """\
        #include "kernel_operator.h"
        #include "kernel_tiling/kernel_tiling.h"
        static_assert(QWEN_FAKE_DEVKIT == 1 && QWEN_FAKE_TILING == 1, "devkit and tiling headers are on the path");
        void good_kernel() {}
        """)
    _kernel(ops, "broken_mix", """\
        #include "kernel_operator.h"
        #define KERNEL_TASK_TYPE_DEFAULT(type)
        KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_MIX_AIC_1_2);  // so checked as AIV and AIC
        #ifdef __DAV_CUBE__
        void cube_side() { undeclared_cube_call(1); }
        #endif
        void broken_kernel() { int x = ; }
        """)
    proc = run_script("--ops-root", str(ops), devkit=devkit)
    lines = proc.stdout.strip().splitlines()
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "ok    good/good [AIV]" in lines
    fails = [l for l in lines if l.startswith("FAIL")]
    assert len(fails) == 2 and {l.split()[2] for l in fails} == {"[AIV]:", "[AIC]:"}
    assert all(l.startswith("FAIL  broken_mix/broken_mix [") and "broken_mix.cpp" in l and "error:" in l
               for l in fails)
    aic = next(l for l in fails if "[AIC]" in l)
    assert "undeclared_cube_call" in aic  # the first error of the AIC variant, not a later one
    aiv = next(l for l in fails if "[AIV]" in l)
    assert "expected primary-expression" in aiv
    assert lines[-2].startswith("ascendc real headers: 1/3 variants compile (2 AIV, 1 AIC)")
    assert lines[-1] == "ascendc real headers: 1/2 kernels compile"


def test_no_devkit_is_a_skip_with_its_reason(tmp_path):
    missing = tmp_path / "no-devkit"
    proc = run_script(devkit=missing)
    assert proc.returncode == 0
    assert proc.stdout.strip() == (f"ascendc real headers: skipped (no asc-devkit at {missing} (no "
                                   f"include/kernel_operator.h); set ASC_DEVKIT to CANN's asc-devkit)")
