"""bench/ops_floor.py runs, times both forms of each decode op and computes a floor for each.

Run in-process at batch 1 (Qwen3.5's real shapes, about 10 MB of tensors) with
one repeat, so this takes a second or two; nothing about speed is asserted.
"""
from __future__ import annotations

import importlib.util
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "bench" / "ops_floor.py"


def _load():
    spec = importlib.util.spec_from_file_location("ops_floor", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_table_has_every_op_with_positive_times_and_floor(capsys):
    rows = _load().main(["--batches", "1", "--repeats", "1", "--bandwidth-mib", "64"])
    assert {row["op"] for row in rows} == {"causal_conv1d_update", "fused_recurrent_gated_delta_rule"}
    for row in rows:
        assert row["batch"] == 1 and row["moved"] > 0
        assert row["floor"] > 0 and row["reference"] > 0 and row["vectorised"] > 0
    printed = capsys.readouterr().out
    assert "load average" in printed and "| causal_conv1d_update | 1 |" in printed


def test_conv_floor_counts_state_rows_read_and_written():
    module = _load()
    _, moved = module.conv_case(2)
    channels, width = 8192, 4
    assert moved == 4 * (2 * 2 * (width - 1) * channels + 2 * 2 * channels + channels * (width + 1))
