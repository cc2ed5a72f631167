#!/usr/bin/env python3
"""triton-ascend's front end: every Triton kernel launch the ops make on an NPU, lowered to linalg/HIVM.

Runs in an environment whose ``triton`` is triton-ascend 3.2.0 (``.ci/triton_ascend_check``
creates it). Each launch of ``triton_launches.enumerate_launches("npu")`` (the
ops' host code with its Ascend branches, at the Qwen3.5 shapes, bfloat16 and
float16, with the fixed config Ascend launches) is bound with triton-ascend's
own binder and taken through the stages its ``AscendBackend`` defines for an
NPU target up to the last one that needs no CANN: Python AST -> TTIR (Triton's
passes) -> ``triton-adapter-opt`` (shipped in the wheel: TTIR to linalg, HIVM
and HFusion). The next stage, linalg -> NPU binary, runs CANN's
``bishengir-compile``: without CANN it is not run, and nothing here says a
binary was built.

Prints one line per kernel (``ok`` or ``FAIL <kernel>: <first compiler
error>``) and the summary ``triton-ascend front end: K/N kernels lower``.
Exit status 1 if a kernel fails, 2 if this Python's triton is not triton-ascend.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

if os.environ.get("TRITON_INTERPRET") == "1":
    os.environ.pop("TRITON_INTERPRET")  # the kernels must be compilable JITFunctions

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from compile_errors import first_error  # noqa: E402

# An Ascend 910B (the part the kernels' UB budgets are written for): the front end does not depend on it.
ASCEND_ARCH = "Ascend910B3"
LAST_STAGE_WITHOUT_CANN = "ttadapter"


def toolchain_missing() -> str:
    try:
        import triton
        from triton.backends.compiler import GPUTarget
        from triton.compiler.compiler import make_backend
    except Exception as exc:  # noqa: BLE001 - any import failure is a missing toolchain
        return f"triton is not importable: {exc}"
    try:
        make_backend(GPUTarget("npu", ASCEND_ARCH, 0))
    except Exception as exc:  # noqa: BLE001
        return f"triton {triton.__version__} is not triton-ascend (no NPU backend): {exc}"
    return ""


def cann_compiler() -> str:
    """The path of CANN's bishengir-compile if installed, else ""."""
    try:
        from triton.backends.ascend.utils import _get_npucompiler_path

        path = _get_npucompiler_path()
    except Exception:  # noqa: BLE001 - no CANN
        return ""
    return path if path and os.path.exists(path) else ""


def lower(launch) -> tuple[bool, str, float]:
    """(ok, first error, seconds) of one launch through triton-ascend's front end."""
    from triton._C.libtriton import get_cache_invalidating_env_vars, ir
    from triton.backends.compiler import GPUTarget
    from triton.compiler.compiler import ASTSource, make_backend

    start = time.perf_counter()
    target = GPUTarget("npu", ASCEND_ARCH, 0)
    backend = make_backend(target)
    jit = launch.kernel.kernel
    kwargs = dict(launch.kwargs, **launch.configs[0], debug=False)
    try:
        # As triton-ascend's JITFunction.run binds a launch (runtime/jit.py of the wheel).
        jit.create_binder(backend)
        bound_args, sig_and_spec, _, _, _ = jit.binder(*launch.args, **kwargs)
        options = backend.parse_options(kwargs)
        bound_vals = tuple(bound_args.values())
        sigkeys = [jit.params[i].name for i in jit.non_constexpr_indices]
        signature = {k: ("*i8" if v == "none" else v) for k, v in zip(sigkeys, sig_and_spec[:len(sigkeys)])}
        attrs = backend.get_attrs_descriptor(jit.params, bound_vals)
        constant_params = attrs.get_constants()
        constants = {p.name: v for v, p in zip(bound_vals, jit.params)
                     if p.is_constexpr or p.num in constant_params or v is None}
        src = ASTSource(jit, signature, constants, attrs)
        # The stages of the NPU target up to the last one without CANN.
        context = ir.context()
        ir.load_dialects(context)
        backend.load_dialects(context)
        module = src.make_ir(options, backend.get_codegen_implementation(), backend.get_module_map(), context)
        metadata = {"hash": src.hash(), "target": target, **options.__dict__, **get_cache_invalidating_env_vars()}
        stages = {}
        backend.add_stages(stages, options)
        for name, stage in stages.items():
            module = stage(module, metadata)
            if name == LAST_STAGE_WITHOUT_CANN:
                break
        if "linalg" not in str(module) and "hivm" not in str(module):
            return False, "triton-adapter-opt produced no linalg/HIVM", time.perf_counter() - start
    except Exception as exc:  # noqa: BLE001 - the first compiler error is the report
        return False, first_error(exc), time.perf_counter() - start
    return True, "", time.perf_counter() - start


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--kernels", default="", help="comma-separated kernel names (default: all)")
    p.add_argument("--quiet", action="store_true", help="no line per launch variant")
    args = p.parse_args(argv)
    missing = toolchain_missing()
    if missing:
        print(f"triton-ascend front end: SKIPPED: {missing}")
        return 2
    import triton

    import triton_launches

    t0 = time.perf_counter()
    launches = triton_launches.only_kernels(triton_launches.enumerate_launches("npu"), args.kernels)
    names = list(dict.fromkeys(launch.name for launch in launches))
    cann = cann_compiler()
    print(f"== triton-ascend {triton.__version__} front end (AST -> TTIR -> triton-adapter-opt: linalg/HIVM) for "
          f"{ASCEND_ARCH}: {len(launches)} launch variants of {len(names)} kernels, enumerated in "
          f"{time.perf_counter() - t0:.1f} s", flush=True)
    print("== binary stage (linalg -> NPU binary, bishengir-compile): "
          + (f"CANN found at {cann}, but not run by this check" if cann else
             "needs CANN, not installed here: NOT RUN (no Ascend binary is built or claimed)"), flush=True)
    failures: dict[str, tuple[str, str]] = {}
    seconds: dict[str, float] = {}
    for launch in launches:
        ok, error, secs = lower(launch)
        seconds[launch.name] = seconds.get(launch.name, 0.0) + secs
        if not args.quiet:
            print(f"  {'lowered' if ok else 'FAILED'} {launch.describe(0)} in {secs:.1f} s" + ("" if ok else f": {error}"),
                  flush=True)
        if not ok and launch.name not in failures:
            failures[launch.name] = (error, launch.describe(0))
    for name in names:
        count = sum(1 for launch in launches if launch.name == name)
        if name in failures:
            error, where = failures[name]
            print(f"FAIL {name}: {error}  ({where})")
        else:
            print(f"ok   {name}: {count} launch variants lowered to linalg/HIVM in {seconds[name]:.1f} s")
    print(f"triton-ascend front end: {len(names) - len(failures)}/{len(names)} kernels lower  "
          f"(binary stage not run: needs CANN; {time.perf_counter() - t0:.0f} s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
