"""bench/ops_floor.py runs, times every op the torch backend serves on the CPU and computes a floor for each.

Run in-process on small workloads (decode batch 1 over 64 cached tokens, a
prefill of 128 tokens, Qwen3.5-0.8B's shapes) with one repeat, so this takes
seconds; nothing about speed is asserted.
"""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from qwen_ops.testing import Draw

SCRIPT = Path(__file__).resolve().parents[1] / "bench" / "ops_floor.py"
DECODE_OPS = {"causal_conv1d_update", "fused_recurrent_gated_delta_rule", "fused_gdn_gating", "paged_decode_attention",
              "mixed_attention", "reshape_and_cache"}
PREFILL_OPS = {"causal_conv1d_fn", "chunk_gated_delta_rule", "fused_gdn_gating", "prefill_attention",
               "reshape_and_cache"}


def _load():
    spec = importlib.util.spec_from_file_location("ops_floor", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass resolves annotations through sys.modules
    spec.loader.exec_module(module)
    return module


def test_table_has_every_op_with_positive_times_and_floor(capsys):
    rows = _load().main(["--workloads", "decode1", "prefill128", "--repeats", "1", "--bandwidth-mib", "64",
                         "--context", "64"])
    assert {row["op"] for row in rows if row["workload"].startswith("decode")} | {"mixed_attention"} == DECODE_OPS
    assert {row["op"] for row in rows if row["workload"].startswith("prefill")} == PREFILL_OPS
    for row in rows:
        assert row["moved"] > 0 and row["floor"] > 0 and row["backend"] > 0 and row["call"] > 0
        assert row.get("reference", 1.0) > 0
    printed = capsys.readouterr().out
    assert "one empty torch op call" in printed and "load average" in printed and "| causal_conv1d_update | decode 1 |" in printed


def test_conv_floor_counts_state_rows_read_and_written():
    module = _load()
    case = module.conv_update(2, Draw(seed=0))
    channels, width = 6144, 4  # Qwen3.5-0.8B: 2 * 16 * 128 + 16 * 128 channels
    assert case.moved == 4 * (2 * 2 * (width - 1) * channels + 2 * 2 * channels + channels * (width + 1))
