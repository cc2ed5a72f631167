#!/usr/bin/env python3
"""sm_90 ahead of time: every Triton kernel launch of the ops compiled for an H100/H200, without a GPU.

Each launch of ``triton_launches.enumerate_launches("cuda")`` (every kernel, at
the Qwen3.5 shapes, bfloat16 and float16, as the ops' host code makes it) is
bound with Triton's own binder (the specialisation a real launch would get) and
compiled with ``triton.compile(ASTSource(...), target=GPUTarget("cuda", 90, 32))``
through the ``ptxas`` the triton wheel ships. Per (launch, config): registers
and spill bytes (ptxas -v), shared memory (the kernel's metadata), the number
of ``mma``/``wgmma`` instructions in the PTX and the compile seconds (cold: a
fresh Triton cache).

* CI mode (default): each kernel's first launch variant in its first autotune config
  (one compile per kernel: bounded time);
* ``--variants``: the first config of every launch variant;
* ``--all``: every launch variant in every autotune config (bench mode);
  ``--markdown FILE`` writes the per-config table (for bench/RESULTS.md).

Prints one line per kernel (``ok`` or ``FAIL <kernel>: <first compiler error>``)
and the summary ``sm_90: K/N kernels compile; spills in M`` (M: kernels with
any spill in a config compiled). Exit status 1 if a kernel fails to compile,
spills more than ``MAX_SPILL_BYTES`` in a config, needs more shared memory
than an sm_90 block has, or is one of ``TENSOR_CORE_KERNELS`` and spills at
all or has no ``mma``/``wgmma`` in a config (with ``--max-compile-s S``: or a
config's cold compile took longer than S); 2 if this Triton has no CUDA
backend or ptxas.
What this cannot show: run times (no device here) and whether the autotuner's
pick on a GPU is the fastest.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import os
import re
import sys
import tempfile
import time
from dataclasses import dataclass

# A fresh cache: compile seconds are cold, and nothing earlier is reused. Set before triton is imported.
os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix="qwen_ops_sm90_cache_")
# Triton 3.9 warns when this is unset; 1 is its current default (what a launch on the GPU gets).
os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
if os.environ.get("TRITON_INTERPRET") == "1":
    # The kernels must be compilable JITFunctions: never interpreted here.
    os.environ.pop("TRITON_INTERPRET")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import triton_launches  # noqa: E402
from compile_errors import first_error  # noqa: E402

SM90_SHARED_BYTES = 227 * 1024  # the most shared memory one block may use on sm_90
MAX_SPILL_BYTES = 4096  # spill stores per thread a kept config may have (issue 22)
# Kernels written for tensor cores (issue 22: the GDN chunk kernels): every config must use mma/wgmma and spill
# nothing. A name no launch has is an error (a renamed kernel cannot drop out of the requirement).
TENSOR_CORE_KERNELS = ("_chunk_prep_kernel", "_chunk_solve_kernel", "_chunk_wu_kernel", "_chunk_state_kernel")
# GPUTarget(backend, capability, warp size): an H100/H200, as its driver reports it (warps of 32 threads).
TARGET_ARGS = ("cuda", 90, 32)


@dataclass
class Result:
    launch: "triton_launches.Launch"
    config_index: int
    ok: bool
    error: str = ""
    registers: int = -1
    spill_stores: int = 0
    spill_loads: int = 0
    shared: int = 0
    mma: int = 0
    wgmma: int = 0
    seconds: float = 0.0
    max_compile_s: float | None = None  # the --max-compile-s limit this config was held to, if any

    @property
    def over_limit(self) -> str:
        if not self.ok:
            return ""
        if self.spill_stores > MAX_SPILL_BYTES:
            return f"{self.spill_stores} bytes of spill stores (limit {MAX_SPILL_BYTES})"
        if self.shared > SM90_SHARED_BYTES:
            return f"{self.shared} bytes of shared memory (limit {SM90_SHARED_BYTES})"
        if self.launch.name in TENSOR_CORE_KERNELS:
            if self.spill_stores + self.spill_loads:
                return f"{self.spill_stores}/{self.spill_loads} bytes of spill stores/loads (a tensor-core kernel: 0)"
            if not self.mma + self.wgmma:
                return "no mma/wgmma (a tensor-core kernel)"
        if self.max_compile_s is not None and self.seconds > self.max_compile_s:
            return f"a {self.seconds:.1f} s cold compile (limit {self.max_compile_s:g} s)"
        return ""


def toolchain_missing() -> str:
    """Why this Python cannot compile for sm_90 ahead of time, or "" if it can."""
    try:
        import triton
        from triton.backends.compiler import GPUTarget
        from triton.compiler.compiler import make_backend
    except Exception as exc:  # noqa: BLE001 - any import failure is a missing toolchain
        return f"triton is not importable: {exc}"
    try:
        make_backend(GPUTarget(*TARGET_ARGS))
    except Exception as exc:  # noqa: BLE001
        return f"triton {triton.__version__} has no CUDA backend: {exc}"
    from triton.backends.nvidia.compiler import get_ptxas

    try:
        path = get_ptxas(TARGET_ARGS[1]).path
    except Exception as exc:  # noqa: BLE001
        return f"triton {triton.__version__} finds no ptxas: {exc}"
    return "" if os.path.exists(path) else f"ptxas not found at {path}"


PTXAS_USED = re.compile(r"Used (\d+) registers")
PTXAS_SPILL = re.compile(r"(\d+) bytes spill stores, (\d+) bytes spill loads")


def compile_one(launch, config_index: int) -> Result:
    """Bind ``launch`` with ``config`` as Triton's launcher would and compile it for sm_90."""
    from triton import knobs
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource, compile
    from triton.compiler.compiler import make_backend
    from triton.runtime.jit import create_function_from_signature

    result = Result(launch, config_index, ok=False)
    config = dict(launch.configs[config_index])
    kwargs = dict(launch.kwargs, **config, debug=False)
    jit = launch.kernel.kernel
    target = GPUTarget(*TARGET_ARGS)
    backend = make_backend(target)
    knobs.nvidia.dump_ptxas_log = True  # ptxas -v's report goes to stdout: captured below
    log = io.StringIO()
    start = time.perf_counter()
    try:
        binder = create_function_from_signature(jit.signature, jit.params, backend)
        bound_args, specialization, options = binder(*launch.args, **kwargs)
        options, signature, constexprs, attrs = jit._pack_args(backend, kwargs, bound_args, specialization, options)
        with contextlib.redirect_stdout(log):
            kernel = compile(ASTSource(jit, signature, constexprs, attrs), target=target, options=options.__dict__)
    except Exception as exc:  # noqa: BLE001 - the first compiler error is the report
        result.seconds = time.perf_counter() - start
        result.error = first_error(exc)
        return result
    result.seconds = time.perf_counter() - start
    text = log.getvalue()
    used, spill = PTXAS_USED.search(text), PTXAS_SPILL.search(text)
    result.registers = int(used.group(1)) if used else -1
    if spill:
        result.spill_stores, result.spill_loads = int(spill.group(1)), int(spill.group(2))
    result.shared = int(kernel.metadata.shared)
    ptx = kernel.asm["ptx"]
    result.wgmma = len(re.findall(r"\bwgmma\.mma_async", ptx))
    result.mma = len(re.findall(r"(?<!wg)\bmma\.sync", ptx))
    result.ok = True
    return result


def ci_selection(launches) -> list:
    """Each kernel's first launch variant (in enumeration order)."""
    first = {}
    for launch in launches:
        first.setdefault(launch.name, launch)
    return list(first.values())


def run(launches, all_configs: bool, progress=print, max_compile_s: float | None = None) -> list[Result]:
    results = []
    for launch in launches:
        indices = range(len(launch.configs)) if all_configs else range(min(1, len(launch.configs)))
        for i in indices:
            r = compile_one(launch, i)
            r.max_compile_s = max_compile_s
            results.append(r)
            progress(f"  {'compiled' if r.ok else 'FAILED'} {launch.describe(i)} in {r.seconds:.1f} s"
                     + (f": {r.registers} regs, spill {r.spill_stores} B, shared {r.shared} B, mma {r.mma}, "
                        f"wgmma {r.wgmma}" if r.ok else f": {r.error}"))
    return results


def kernel_lines(results) -> tuple[list[str], bool, int, int]:
    """(one line per kernel, all passed, kernels that compile in every config, kernels with spills)."""
    lines, passed, compiling, spilling = [], True, 0, 0
    names = list(dict.fromkeys(r.launch.name for r in results))
    for name in names:
        mine = [r for r in results if r.launch.name == name]
        failed = [r for r in mine if not r.ok]
        over = [r for r in mine if r.over_limit]
        ok = [r for r in mine if r.ok]
        if any(r.spill_stores > 0 for r in ok):
            spilling += 1
        if failed:
            passed = False
            lines.append(f"FAIL {name}: {failed[0].error}  ({failed[0].launch.describe(failed[0].config_index)})")
            continue
        compiling += 1
        variants = len({id(r.launch) for r in mine})
        summary = (f"{variants} variants, {len(mine)} configs; max {max(r.registers for r in ok)} regs, "
                   f"max spill {max(r.spill_stores for r in ok)} B, max shared {max(r.shared for r in ok)} B, "
                   f"mma/wgmma in {sum(1 for r in ok if r.mma + r.wgmma)}/{len(ok)}, "
                   f"{sum(r.seconds for r in ok):.0f} s (slowest config {max(r.seconds for r in ok):.1f} s)")
        if over:
            passed = False
            lines.append(f"FAIL {name}: {over[0].over_limit} in {over[0].launch.describe(over[0].config_index)}; "
                         + summary)
        else:
            lines.append(f"ok   {name}: {summary}")
    return lines, passed, compiling, spilling


def markdown(results) -> str:
    import triton

    head = (f"sm_90 ahead of time (`triton.compile`, GPUTarget(\"cuda\", 90, 32), triton {triton.__version__} "
            "and its ptxas; no GPU): every launch variant x autotune config\n\n"
            "| kernel | constexprs | dtype | config | regs | spill st/ld B | shared B | mma | wgmma | compile s |\n"
            "|---|---|---|---|---:|---:|---:|---:|---:|---:|\n")
    rows = []
    for r in results:
        launch = r.launch
        dtype = next((t for t in launch.signature.split(", ") if t in ("*bfloat16", "*float16")), "-").lstrip("*")
        consts = " ".join(f"{k}={v}" for k, v in launch.kwargs.items() if k != "DOT_PRECISION")
        config = " ".join(f"{k}={v}" for k, v in launch.configs[r.config_index].items())
        if r.ok:
            rows.append(f"| {launch.name} | {consts} | {dtype} | {config} | {r.registers} | "
                        f"{r.spill_stores}/{r.spill_loads} | {r.shared} | {r.mma} | {r.wgmma} | {r.seconds:.1f} |")
        else:
            rows.append(f"| {launch.name} | {consts} | {dtype} | {config} | FAIL: {r.error[:80]} | | | | | |")
    return head + "\n".join(rows) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--all", action="store_true", help="every launch variant in every autotune config (bench mode)")
    p.add_argument("--variants", action="store_true", help="the first config of every launch variant")
    p.add_argument("--kernels", default="", help="comma-separated kernel names to compile (default: all)")
    p.add_argument("--max-compile-s", type=float, default=None,
                   help="fail a config whose cold compile takes longer (bench mode; not for a loaded CI machine)")
    p.add_argument("--markdown", default=None, help="write the per-config table to this file ('-': stdout)")
    p.add_argument("--quiet", action="store_true", help="no line per compiled config")
    args = p.parse_args(argv)
    missing = toolchain_missing()
    if missing:
        print(f"sm_90: SKIPPED: {missing}")
        return 2
    import triton

    t0 = time.perf_counter()
    every_launch = triton_launches.enumerate_launches("cuda")
    stale = set(TENSOR_CORE_KERNELS) - {launch.name for launch in every_launch}
    if stale:
        raise RuntimeError(f"sm90_check: TENSOR_CORE_KERNELS names {sorted(stale)}, which no op launches")
    launches = triton_launches.only_kernels(every_launch, args.kernels)
    n_kernels = len({launch.name for launch in launches})
    mode = ("every variant x config" if args.all else "first config of every variant" if args.variants else
            "CI mode: first variant and config of each kernel")
    print(f"== sm_90 ({mode}): {len(launches)} launch variants of {n_kernels} kernels enumerated in "
          f"{time.perf_counter() - t0:.1f} s, triton {triton.__version__}", flush=True)
    if not (args.all or args.variants):
        launches = ci_selection(launches)
    results = run(launches, args.all, progress=(lambda _line: None) if args.quiet else
                  (lambda line: print(line, flush=True)), max_compile_s=args.max_compile_s)
    lines, passed, compiling, spilling = kernel_lines(results)
    for line in lines:
        print(line)
    print(f"sm_90: {compiling}/{n_kernels} kernels compile; spills in {spilling}  "
          f"({len(results)} compiles in {time.perf_counter() - t0:.0f} s)")
    if args.markdown:
        text = markdown(results)
        if args.markdown == "-":
            print(text)
        else:
            with open(args.markdown, "w") as f:
                f.write(text)
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
