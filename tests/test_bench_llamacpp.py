"""bench/e2e/bench_vs_llamacpp.py's parsing and report code, on saved tool output (no llama.cpp build in CI).

The llama-bench JSON, llama-batched-bench table and llama-simple output below have the tools' documented
shapes (fields ``n_prompt``, ``n_gen``, ``avg_ts``; the ``| PP | TG | B | N_KV | T_PP s | S_PP t/s | T_TG s |
S_TG t/s | T s | S t/s |`` table; the prompt echoed before the generated text). The script is run as a user
would with ``--parse-only``; its table must carry every precision and workload with the ratio of the two rates.
"""
from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "bench" / "e2e" / "bench_vs_llamacpp.py"


def _module():
    spec = importlib.util.spec_from_file_location("bench_vs_llamacpp", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def llama_bench_json(pp: float, tg: float) -> str:
    return json.dumps([
        {"model_type": "qwen35 0.8B F32", "n_threads": 2, "n_prompt": 512, "n_gen": 0, "avg_ts": pp,
         "stddev_ts": 1.0, "samples_ts": [pp]},
        {"model_type": "qwen35 0.8B F32", "n_threads": 2, "n_prompt": 0, "n_gen": 64, "avg_ts": tg,
         "stddev_ts": 0.1, "samples_ts": [tg]},
        {"model_type": "qwen35 0.8B F32", "n_threads": 2, "n_prompt": 128, "n_gen": 64, "avg_ts": 20.0,
         "stddev_ts": 0.1, "samples_ts": [20.0]},
    ])


def batched_bench_table(s_tg: float) -> str:
    return ("main: n_kv_max = 1344, n_batch = 512, n_ubatch = 512\n\n"
            "|    PP |     TG |    B |   N_KV |   T_PP s | S_PP t/s |   T_TG s | S_TG t/s |      T s |    S t/s |\n"
            "|-------|--------|------|--------|----------|----------|----------|----------|----------|----------|\n"
            f"|    16 |     64 |   16 |   1280 |    0.500 |   512.00 |   10.000 | {s_tg:8.2f} |   10.500 |   121.90 |\n")


PROMPT_OUT = "The quick brown fox jumps over the lazy dog. Once upon a time"


def test_parsers():
    m = _module()
    assert m.parse_llama_bench(llama_bench_json(130.0, 13.0)) == {"pp512": 130.0, "tg64": 13.0, "pp128+tg64": 20.0}
    rows = m.parse_batched_bench(batched_bench_table(76.0))
    assert len(rows) == 1 and rows[0]["S_TG"] == 76.0 and rows[0]["B"] == 16 and rows[0]["PP"] == 16
    with pytest.raises(ValueError, match="S_TG"):
        m.parse_batched_bench("no table here\n| a | b |\n")
    assert m.simple_generated_text("load...\n" + PROMPT_OUT + " there was", PROMPT_OUT) == " there was"
    assert m.agreeing_tokens([" there", " was", " a"], " there was the") == 2
    assert m.agreeing_tokens([" here"], " there") == 0


def test_decode_rate_is_the_tg_test_not_the_mixed_one():
    """-pg 128,64 adds a prompt+generation test with n_gen = 64 too: the decode rate must be the pure tg one."""
    rates = _module().parse_llama_bench(llama_bench_json(130.0, 13.0))
    assert rates["tg64"] == 13.0 and rates["pp512"] == 130.0


def test_parse_only_report(tmp_path):
    saved = {
        "llama": {"float32": {"llama_bench": llama_bench_json(130.0, 13.0), "batched_bench": batched_bench_table(76.0)},
                  "int8": {"llama_bench": llama_bench_json(300.0, 33.0), "batched_bench": batched_bench_table(120.0)}},
        "qwen_ops": {"float32": {"decode": 9.5, "prefill": 155.0, "parallel": 55.0},
                     "int8": {"decode": 33.0, "prefill": 150.0, "parallel": 180.0}},
        "greedy": {"qwen_ops_pieces": [" there", " was", " a"], "llama_simple": PROMPT_OUT + " there was the"},
        "loads": {"float32": [1.5, 0.8]},
        "loadavg": "1.50 1.40 1.30",
    }
    path = tmp_path / "saved.json"
    path.write_text(json.dumps(saved))
    done = subprocess.run([sys.executable, str(SCRIPT), "--parse-only", str(path)], capture_output=True, text=True,
                          timeout=120, cwd=REPO)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert lines[0].startswith("| precision | workload |") and re.fullmatch(r"(\|---)+\|", lines[1])
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in lines[2:] if line.startswith("|")]
    assert len(rows) == 6 and {r[0] for r in rows} == {"float32", "int8"}
    by = {(r[0], r[1].split(",")[0]): r for r in rows}
    decode = by[("float32", "decode")]
    assert float(decode[2]) == 9.5 and float(decode[3]) == 13.0 and decode[4] == f"{9.5 / 13.0:.2f}x"
    assert by[("int8", "16 parallel sequences (16-token prompts")][3] == "120.0"
    assert "greedy agreement: 2/3 tokens" in done.stdout
    assert "load float32: qwen_ops 1.5 s, llama.cpp 0.8 s" in done.stdout
    assert "load average during the run: 1.50 1.40 1.30" in done.stdout
