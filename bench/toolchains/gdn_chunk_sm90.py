"""Compile the GDN chunk kernels for sm_90 ahead of time, config by config, and print what ptxas reports.

No GPU is needed: ``triton.compile`` lowers each (kernel, autotune config) at
the Qwen3.5 GDN shapes (``qwen_ops.testing.SHAPES``: 16 key / 32 value heads
and 16 / 16, head dims 128) for ``GPUTarget("cuda", 90, 64)``, then the ptxas
shipped in the triton wheel is run with ``-v`` on the PTX to read registers and
spill bytes. Each compile uses a fresh cache directory, so the seconds are a
cold compile. The variant compiled is the serving one: in-kernel l2norm, a
state pool, no separate final state (``model/gdn.py``).

    .venv/bin/python bench/toolchains/gdn_chunk_sm90.py [--dtype bf16 fp16] [--shape qwen3.5] [--first]

Columns: kernel, shape, dtype, config, registers, spill stores + loads
(bytes), shared memory (bytes, limit 227 KB a block on sm_90), ``mma``/``wgmma``
instructions in the PTX, ``fma.rn.f32`` instructions, cold compile seconds (``triton.compile``
with its own ptxas run; the second ptxas run, for the report, is not counted).
``--first`` compiles only the first config of each kernel (what a bounded CI
run does). Compile one config at a time: each is a CPU-heavy process.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SM90_SHARED_LIMIT = 227 * 1024
# The inverse of the chunk's triangular matrix is float32 on purpose (its error reaches every w and u row):
# no tensor-core instructions are expected there.
FLOAT32_KERNELS = {"_chunk_solve_kernel"}
DTYPES = {"bf16": "bf16", "fp16": "fp16"}


def _ptxas() -> str:
    """The ptxas triton itself runs for sm_90 (triton 3.9 ships two and picks the newer one there)."""
    from triton.backends.nvidia.compiler import get_ptxas
    return get_ptxas(90).path


def _variants(shape, dtype: str):
    """(kernel, configs, signature, constexprs) per kernel at one shape, as ``ops/gdn/triton_chunk.py`` launches them."""
    from qwen_ops.ops.gdn import triton_chunk as tc
    from qwen_ops.ops.gdn.chunk_table import CHUNK
    from qwen_ops.ops.gdn.triton_common import L2NORM_EPS, tile

    hk, hv, dk, dv = shape.hk, shape.hv, shape.dk, shape.dv
    heads = dict(HK=hk, HV=hv, DK=dk, BT=CHUNK)
    # Token-major rows of contiguous [T, H, D] inputs (model/gdn.py); workspaces as the host code allocates them:
    # the matrices that are only dot operands in the dot dtype (q's), the rest float32.
    gains = {"chunk_decay_ws": "*fp32", "q_gain_ws": "*fp32", "k_gain_ws": "*fp32", "aqk_ws": f"*{dtype}"}
    qk_strides = {"stride_q_t": "i32", "stride_q_h": "i32", "stride_k_t": "i32", "stride_k_h": "i32"}
    prep_sig = {"q": f"*{dtype}", "k": f"*{dtype}", "g": "*fp32", "beta": f"*{dtype}", "chunks": "*i32", **gains,
                "a_ws": "*fp32", "w_gain_ws": "*fp32", "scale": "fp32", "n_chunks": "i32", **qk_strides,
                "stride_g_t": "i32", "stride_b_t": "i32"}
    wu_sig = {"k": f"*{dtype}", "v": f"*{dtype}", "chunks": "*i32", "tk_ws": f"*{dtype}", "tv_ws": f"*{dtype}",
              "w_ws": f"*{dtype}", "u_ws": "*fp32", "n_chunks": "i32", "stride_k_t": "i32", "stride_k_h": "i32",
              "stride_v_t": "i32", "stride_v_h": "i32"}
    solve_sig = {"beta": f"*{dtype}", "chunks": "*i32", "a_ws": "*fp32", "w_gain_ws": "*fp32",
                 "tk_ws": f"*{dtype}", "tv_ws": f"*{dtype}", "n_chunks": "i32", "stride_b_t": "i32"}
    state_sig = {"q": f"*{dtype}", "k": f"*{dtype}", "o": f"*{dtype}", "chunks": "*i32", "seq_chunks": "*i32",
                 **gains, "w_ws": f"*{dtype}", "u_ws": "*fp32", "state_in": "*fp32", "final": "*fp32",
                 "read_rows": "*i32", "write_rows": "*i32", "n_seqs": "i32", **qk_strides}
    prep, solve, wu, state = tc._chunk_prep_kernel, tc._chunk_solve_kernel, tc._chunk_wu_kernel, tc._chunk_state_kernel
    return [
        (prep.kernel, prep.cuda_configs, prep_sig, dict(heads, L2NORM=True, EPS=L2NORM_EPS)),
        (solve.kernel, solve.cuda_configs, solve_sig, dict(HV=hv, BT=CHUNK)),
        (wu.kernel, wu.cuda_configs, wu_sig, dict(heads, DV=dv)),
        (state.kernel, state.cuda_configs, state_sig,
         dict(heads, DV=dv, BLOCK_K=tile(dk), POOL=True, STORE_FINAL=False)),
    ]


def _compile_one(fn, signature, constexprs, config) -> dict:
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    meta = {k: v for k, v in config.items() if k not in ("num_warps", "num_stages")}
    constants = dict(constexprs, **meta)
    sig = dict(signature)
    for name in constants:
        sig[name] = "constexpr"
    # As the runtime specializes a launch on torch tensors: pointers 16-byte aligned, and integer arguments
    # that are multiples of 16 marked so (every stride at these shapes: H * D, D, Hv are multiples of 16).
    attrs = {(fn.arg_names.index(name),): [["tt.divisibility", 16]] for name, kind in sig.items()
             if kind.startswith("*") or name.startswith("stride_")}
    src = ASTSource(fn, sig, constexprs=constants, attrs=attrs)
    with tempfile.TemporaryDirectory() as cache:
        os.environ["TRITON_CACHE_DIR"] = cache
        start = time.perf_counter()
        compiled = triton.compile(src, target=GPUTarget("cuda", 90, 64),
                                  options={"num_warps": config.get("num_warps", 4),
                                           "num_stages": config.get("num_stages", 2)})
        seconds = time.perf_counter() - start
        ptx = compiled.asm["ptx"]
        ptx_path = Path(cache) / "kernel.ptx"
        ptx_path.write_text(ptx)
        run = subprocess.run([_ptxas(), "-v", "--regAllocOptLevel=2", "--gpu-name=sm_90a", str(ptx_path), "-o", str(ptx_path) + ".o"],
                             capture_output=True, text=True)
        if run.returncode:
            raise RuntimeError(f"ptxas failed on {fn.__name__}: {run.stderr.strip()}")
        report = run.stdout + run.stderr
    regs = re.search(r"Used (\d+) registers", report)
    spills = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", report)
    return {
        "regs": int(regs.group(1)) if regs else -1,
        "spill": (int(spills.group(1)) + int(spills.group(2))) if spills else -1,
        "shared": compiled.metadata.shared,
        "mma": len(re.findall(r"^\s*(?:wgmma\.mma_async|mma\.sync)", ptx, re.M)),
        "fma": len(re.findall(r"^\s*fma\.rn\.f32", ptx, re.M)),
        "seconds": seconds,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dtype", nargs="+", default=list(DTYPES), choices=list(DTYPES))
    parser.add_argument("--shape", nargs="+", default=["qwen3.5", "qwen3.5-0.8b"])
    parser.add_argument("--kernel", nargs="+", default=None, help="only these kernel names")
    parser.add_argument("--first", action="store_true", help="first config of each kernel only")
    parser.add_argument("--configs", type=json.loads, default=None,
                        help='JSON list of configs to try instead of the kernels\' own, e.g. \'[{"BLOCK_V": 32, "num_warps": 4}]\'')
    args = parser.parse_args()
    from qwen_ops.testing.shapes import SHAPES

    bad = 0
    print(f"{'kernel':22} {'shape':14} {'dtype':5} {'config':34} {'regs':>4} {'spill':>6} {'shared':>7} "
          f"{'mma':>5} {'fma':>6} {'s':>6}")
    for shape_name in args.shape:
        shape = SHAPES[shape_name]
        for dtype in args.dtype:
            for fn, configs, signature, constexprs in _variants(shape, DTYPES[dtype]):
                if args.kernel and fn.__name__ not in args.kernel:
                    continue
                configs = args.configs or configs
                for config in configs[:1] if args.first else configs:
                    r = _compile_one(fn, signature, constexprs, config)
                    ok = r["spill"] == 0 and (r["mma"] > 0 or fn.__name__ in FLOAT32_KERNELS) and r["shared"] <= SM90_SHARED_LIMIT and r["seconds"] <= 30
                    bad += not ok
                    cfg = ",".join(f"{k}={v}" for k, v in config.items())
                    print(f"{fn.__name__:22} {shape_name:14} {dtype:5} {cfg:34} {r['regs']:4} {r['spill']:6} "
                          f"{r['shared']:7} {r['mma']:5} {r['fma']:6} {r['seconds']:6.1f}{'' if ok else '  !'}",
                          flush=True)
    print(f"sm_90 GDN chunk: {bad} config(s) with spills, no mma (where expected), shared over 227 KB or compile over 30 s")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
