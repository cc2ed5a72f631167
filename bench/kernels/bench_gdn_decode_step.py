"""``gdn_decode_step`` in one launch against the separate ops it fuses, per backend, side by side in one run.

For each backend and decode batch: the fused op (``backend=``) and the same backend's separate ops composed
as the model composes them at decode (``ops/gdn/decode_step/composed.py``: conv update, gating, recurrent
delta rule, gated RMSNorm: four launches plus the norm's torch ops), on Qwen3.5's GDN layer (16 key / 32
value heads of 128, conv K = 4, float32, a pool of batch + 1 rows), median of ``--repeats`` timed calls
after one warm-up, and the largest difference of the two outputs.

On the CPU the triton backend runs in Triton's interpreter (``TRITON_INTERPRET=1``) and the ascendc backend
on the project's stand-in for the Ascend C API: their times measure those simulators, NOT a device; the
torch backend's fused form is the C++ CPU kernel. On a GPU (``--device cuda``) the triton rows are device
times.

    TRITON_INTERPRET=1 python bench/kernels/bench_gdn_decode_step.py --backends torch,triton,ascendc --batches 1,4
    python bench/kernels/bench_gdn_decode_step.py --device cuda --backends triton --batches 1,32,256
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import torch

from qwen_ops import testing
from qwen_ops.ops import gdn_decode_step
from qwen_ops.ops.gdn.decode_step.composed import composed_decode_step


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    p.add_argument("--backends", default="torch,triton,ascendc")
    p.add_argument("--batches", default="1,4")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--shape", default="qwen3.5", choices=sorted(testing.SHAPES))
    p.add_argument("--json", default=None, help="also write the rows to this file")
    return p.parse_args(argv)


def timed_ms(fn, device: str, repeats: int) -> float:
    """Median wall time of ``repeats`` calls (after one warm-up), in ms, synchronising on a GPU."""
    fn()
    times = []
    for _ in range(repeats):
        if device == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        fn()
        if device == "cuda":
            torch.cuda.synchronize()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def case(shapes, batch: int, device: str) -> dict:
    draw = testing.Draw(seed=batch)
    call = testing.decode_step_call(draw, tokens=batch, hk=shapes.hk, hv=shapes.hv, dk=shapes.dk, dv=shapes.dv,
                                    width=shapes.conv_width, pool_rows=batch + 1,
                                    state_indices=torch.arange(batch, dtype=torch.int32))
    return {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in call.items()}


def main(argv=None) -> int:
    args = parse_args(argv)
    shapes = testing.SHAPES[args.shape]
    rows = []
    simulated = {"triton": "Triton interpreter", "ascendc": "Ascend C stand-in"} if args.device == "cpu" else {}
    print(f"gdn_decode_step vs the separate ops, {args.shape} (Hk {shapes.hk}, Hv {shapes.hv}, Dk {shapes.dk}, "
          f"Dv {shapes.dv}, K {shapes.conv_width}), float32, {args.device}, median of {args.repeats}; "
          f"loadavg {os.getloadavg()[0]:.2f}")
    print(f"{'backend':8} {'batch':>5} {'fused ms':>10} {'separate ms':>12} {'separate/fused':>15} {'max|diff|':>10}  runs on")
    for backend in args.backends.split(","):
        for batch in (int(b) for b in args.batches.split(",")):
            fused_args, separate_args = case(shapes, batch, args.device), case(shapes, batch, args.device)
            fused_out = gdn_decode_step(**fused_args, backend=backend)
            separate_out = composed_decode_step(backend, **separate_args)
            diff = float((fused_out - separate_out).abs().max())
            fused_ms = timed_ms(lambda: gdn_decode_step(**fused_args, backend=backend), args.device, args.repeats)
            separate_ms = timed_ms(lambda: composed_decode_step(backend, **separate_args), args.device, args.repeats)
            where = simulated.get(backend, args.device)
            print(f"{backend:8} {batch:>5} {fused_ms:>10.3f} {separate_ms:>12.3f} {separate_ms / fused_ms:>14.2f}x "
                  f"{diff:>10.1e}  {where}")
            rows.append(dict(backend=backend, batch=batch, fused_ms=fused_ms, separate_ms=separate_ms,
                             max_abs_diff=diff, runs_on=where))
    if simulated:
        print("note: the triton and ascendc rows time CPU simulators (interpreter, stand-in), not a device")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(dict(shape=args.shape, device=args.device, loadavg=os.getloadavg(), rows=rows), f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
