"""The end-to-end single-request benchmark (bench/e2e/bench_single_request.py) in its CI smoke mode.

Built-in tiny model, 16-token prompt, 4 new tokens, one repeat: both engines
run through their public generate APIs and must produce the same greedy
tokens; the timings and the floor must be present and positive (their size is
never asserted).
"""
from __future__ import annotations

import importlib.util
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "bench" / "e2e" / "bench_single_request.py"


def test_smoke_mode_runs_both_engines_with_the_same_tokens(capsys):
    spec = importlib.util.spec_from_file_location("bench_single_request", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    summary = module.main(["--smoke"])
    assert summary["same_tokens"]
    assert summary["floor"] > 0 and summary["bandwidth"] > 0
    for name in ("qwen_ops LLM", "transformers generate"):
        row = summary[name]
        assert len(row["tokens"]) == 4
        assert row["wall"] > 0 and row["ttft"] > 0 and row["itl"] > 0
    printed = capsys.readouterr().out
    assert "| qwen_ops LLM |" in printed and "load average" in printed
