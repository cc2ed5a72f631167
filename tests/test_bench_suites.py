"""The kernel benchmark suites (bench/kernels) run and time every op.

The suites are run in a subprocess, as a user would, with
``QWEN_OPS_BENCH_QUICK=1`` (tiny shapes) and one timed round per case, so
this takes seconds. The JSON report must hold a timing for every public op
with the torch backend (the one that runs everywhere); backends whose timing
would mean nothing here must be skipped with a reason, not silently dropped.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from qwen_ops.ops._backend import IMPLEMENTATIONS

REPO = Path(__file__).resolve().parents[1]
SUITES = REPO / "bench" / "kernels"

# Benchmark function name -> the op it times.
BENCHMARKED_OPS = {
    "test_reshape_and_cache": "reshape_and_cache",
    "test_paged_decode_attention": "paged_decode_attention",
    "test_prefill_attention": "prefill_attention",
    "test_mixed_attention": "mixed_attention",
    "test_chunk_gated_delta_rule": "chunk_gated_delta_rule",
    "test_fused_recurrent_decode": "fused_recurrent_gated_delta_rule",
    "test_fused_gdn_gating": "fused_gdn_gating",
    "test_causal_conv1d_fn": "causal_conv1d_fn",
    "test_causal_conv1d_update": "causal_conv1d_update",
    "test_fused_experts": "fused_experts",
    "test_int8_linear": "int8_linear",
    "test_gdn_decode_step": "gdn_decode_step",
}


def test_every_op_is_benchmarked():
    assert sorted(BENCHMARKED_OPS.values()) == sorted(IMPLEMENTATIONS)


def test_quick_suites_run_and_time_every_op(tmp_path):
    report = tmp_path / "bench.json"
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}  # benchmarks never interpret
    env["QWEN_OPS_BENCH_QUICK"] = "1"
    cmd = [sys.executable, "-m", "pytest", str(SUITES), "-q", "-rs", "-p", "no:cacheprovider",
           "--benchmark-enable", "--benchmark-min-rounds=1", "--benchmark-max-time=0", "--benchmark-warmup=off",
           f"--benchmark-json={report}"]
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]

    benchmarks = json.loads(report.read_text())["benchmarks"]
    timed = {}
    for bench in benchmarks:
        name, params = bench["name"].split("[")[0], bench["params"]
        assert bench["stats"]["rounds"] >= 1 and bench["stats"]["mean"] > 0, bench["name"]
        assert bench["extra_info"]["quick"] is True
        timed.setdefault(BENCHMARKED_OPS[name], set()).add(params["backend"])
    for op in IMPLEMENTATIONS:
        assert "torch" in timed.get(op, set()), f"no torch timing for {op}"
    # Every skipped case says why (pytest -rs lists "SKIPPED [n] file:line: reason").
    for line in proc.stdout.splitlines():
        if line.startswith("SKIPPED"):
            assert line.split(": ", 1)[-1].strip(), line


def test_attention_decode_step_script_runs_and_finds_the_same_bits(capsys):
    """bench/kernels/bench_attention_decode_step.py on one tiny case: a row per case, the two paths equal."""
    sys.path.insert(0, str(SUITES))
    try:
        import bench_attention_decode_step as script
    finally:
        sys.path.remove(str(SUITES))
    assert script.main(["--batches", "1,2", "--dtypes", "float32", "--context", "20", "--repeats", "1",
                        "--calls", "2"]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| ") and "True" in line]
    assert len(rows) == 2, rows
