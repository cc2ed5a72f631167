"""The compiler checks of bench/toolchains/: sm_90 ahead of time (CI mode) and triton-ascend's front end.

The sm_90 check runs here in a subprocess (the kernels must not be interpreted
there), with the first config of each kernel: it must compile all of them within
the spill and shared-memory limits, the GDN chunk kernels on tensor cores with no
spill at all. A deliberately broken kernel must come out as
a failure line naming it with its first compiler error. triton-ascend's front end
runs in its own environment (``.ci/triton_ascend_check``, which CI calls after
this suite); the broken-kernel test of it runs here only where that environment
was built. A missing toolchain is a skip with its reason.
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time

import pytest
from compile_errors import first_error

TOOLCHAINS = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "bench",
                          "toolchains")

ASCEND_ENVS = os.path.join(os.environ.get("QWEN_OPS_CI_CACHE", "/root/.cache/qwen_ops_ci"))


def _env():
    """Compiled, not interpreted; broken_kernel.py (beside this file) importable."""
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.abspath(__file__)))
    env.pop("TRITON_INTERPRET", None)
    return env


def _sm90_missing() -> str:
    out = subprocess.run([sys.executable, "-c", "import sm90_check, sys; print(sm90_check.toolchain_missing())"],
                         cwd=TOOLCHAINS, env=_env(), capture_output=True, text=True, timeout=120)
    return out.stdout.strip() if out.returncode == 0 else f"sm90_check does not import: {out.stderr[-300:]}"


@pytest.fixture(scope="module")
def sm90_missing() -> str:
    return _sm90_missing()


@pytest.fixture
def sm90(sm90_missing):
    if sm90_missing:
        pytest.skip(f"no sm_90 toolchain in this Python: {sm90_missing}")


# Every kernel the ops launch (16 since the GDN chunk kernels became four: prep, inverse, w/u, state).
KERNELS_AT_LEAST = 16


@pytest.mark.timeout(1500)
def test_sm90_ci_mode_compiles_every_kernel(sm90_missing, toolchain_summary):
    if sm90_missing:
        toolchain_summary(f"sm_90: SKIPPED: no sm_90 toolchain in this Python: {sm90_missing}")
        pytest.skip(f"no sm_90 toolchain in this Python: {sm90_missing}")
    start = time.time()
    out = subprocess.run([sys.executable, "sm90_check.py", "--quiet"], cwd=TOOLCHAINS, env=_env(),
                         capture_output=True, text=True, timeout=1400)
    print(out.stdout[-6000:], f"\n(sm_90 CI mode took {time.time() - start:.0f} s)")
    summary = [line for line in out.stdout.splitlines() if line.startswith("sm_90: ")]
    assert summary, out.stdout[-3000:] + out.stderr[-3000:]
    toolchain_summary(f"{summary[0]}  (CI mode: first config of each kernel)")
    kernels, total = summary[0].split()[1].split("/")
    assert int(total) >= KERNELS_AT_LEAST and kernels == total, summary[0]
    assert out.returncode == 0, out.stdout[-3000:]
    # The GDN chunk kernels are held to tensor cores and no spill at all (sm90_check.TENSOR_CORE_KERNELS).
    chunk_lines = [line for line in out.stdout.splitlines() if line.startswith("ok   _chunk_")]
    assert len(chunk_lines) == 4, out.stdout[-3000:]
    for line in chunk_lines:
        assert "max spill 0 B" in line and "mma/wgmma in 1/1" in line, line


def test_sm90_limits_of_a_tensor_core_kernel():
    """A GDN chunk kernel fails on any spill or without mma/wgmma; another kernel only past 4 KB; a slow compile
    fails only under --max-compile-s."""
    script = textwrap.dedent("""
        from types import SimpleNamespace as K
        from sm90_check import Result
        chunk, other = K(name="_chunk_state_kernel"), K(name="_decode_kernel")
        for r in (Result(chunk, 0, ok=True, spill_stores=8, spill_loads=8, wgmma=4), Result(chunk, 0, ok=True),
                  Result(chunk, 0, ok=True, wgmma=4), Result(other, 0, ok=True, spill_stores=8),
                  Result(other, 0, ok=True, spill_stores=5000, mma=1),
                  Result(other, 0, ok=True, seconds=31.0, max_compile_s=30.0)):
            print(repr(r.over_limit))
    """)
    out = subprocess.run([sys.executable, "-c", script], cwd=TOOLCHAINS, env=_env(), capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.splitlines()
    assert "spill stores/loads" in lines[0] and "no mma/wgmma" in lines[1], lines
    assert lines[2] == lines[3] == "''", lines
    assert "5000 bytes of spill stores" in lines[4] and "31.0 s cold compile" in lines[5], lines


BROKEN = textwrap.dedent("""
    import sys
    import {check}
    from broken_kernel import broken_launches
    launches = broken_launches("{target}")
    {body}
""")


def test_sm90_names_a_broken_kernel_and_its_error(sm90):
    body = ("lines, passed, compiling, _ = sm90_check.kernel_lines(sm90_check.run(launches, False, lambda _l: None))\n"
            "print('\\n'.join(lines)); print('passed', passed, 'compiling', compiling)")
    script = BROKEN.format(check="sm90_check", target="cuda", body=body)
    out = subprocess.run([sys.executable, "-c", script], cwd=TOOLCHAINS, env=_env(), capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "FAIL _broken_dot_kernel: " in out.stdout, out.stdout
    line = next(line for line in out.stdout.splitlines() if line.startswith("FAIL"))
    # The first error itself (not the source listing Triton puts first), with where in the kernel it is.
    assert "Error" in line and "(at " in line and "tl.dot" not in line, line
    assert "passed False compiling 0" in out.stdout


def _ascend_python() -> str:
    envs = sorted(d for d in os.listdir(ASCEND_ENVS) if d.startswith("triton-ascend-")) \
        if os.path.isdir(ASCEND_ENVS) else []
    complete = [os.path.join(ASCEND_ENVS, d) for d in envs if os.path.exists(os.path.join(ASCEND_ENVS, d, ".complete"))]
    return os.path.join(complete[-1], "bin", "python") if complete else ""


def test_triton_ascend_names_a_broken_kernel_and_its_error():
    python = _ascend_python()
    if not python:
        pytest.skip(f"no triton-ascend environment under {ASCEND_ENVS} (.ci/triton_ascend_check builds it)")
    body = ("ok, error, _ = triton_ascend_check.lower(launches[0])\n"
            "print('ok', ok); print('error', error)")
    script = BROKEN.format(check="triton_ascend_check", target="npu", body=body)
    # The environment's qwen_ops is the copy its last run of .ci/triton_ascend_check installed.
    # It predates this tree when the launch enumeration (which imports every op's module) does not import there.
    probe = subprocess.run([python, "-c", "from qwen_ops.ops._triton import recorded_launches; import triton_launches"],
                           cwd=TOOLCHAINS, env=_env(), capture_output=True, text=True, timeout=120)
    if probe.returncode != 0:
        pytest.skip("the triton-ascend environment's qwen_ops predates this tree (.ci/triton_ascend_check reinstalls "
                    f"it): {probe.stderr[-200:]}")
    out = subprocess.run([python, "-c", script], cwd=TOOLCHAINS, env=_env(), capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "ok False" in out.stdout, out.stdout
    error = out.stdout.split("error ", 1)[1]
    assert "Error" in error and "(at " in error, out.stdout


def test_first_error_is_the_innermost_cause():
    try:
        try:
            raise AttributeError("'NPUOptions' object has no attribute 'default_dot_input_precision'")
        except AttributeError as inner:
            raise RuntimeError("at 15:38:\n    s = tl.dot(q, k)\n      ^") from inner
    except RuntimeError as outer:
        line = first_error(outer)
    assert line == ("AttributeError: 'NPUOptions' object has no attribute 'default_dot_input_precision' "
                    "(at 15:38 of the kernel source)")
    tool = subprocess.CalledProcessError(1, ["/x/triton-adapter-opt", "k.mlir"],
                                         stderr=b"k.mlir:3:5: note: here\nk.mlir:3:5: error: 'tt.dot' op bad\n")
    assert first_error(tool) == "triton-adapter-opt: k.mlir:3:5: error: 'tt.dot' op bad"
