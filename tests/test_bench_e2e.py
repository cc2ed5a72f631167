"""The end-to-end benchmark (bench/e2e/bench_vs_transformers.py) runs in its --smoke mode.

Run in a subprocess as a user would (the tiny default model, a few tokens, workload b with the
engine also run with its small-M projection kernel off): its table must be well formed (every row
has every column, the numbers parse and are positive), every workload must have rows for both
engines, the floor lines must be printed for each engine of workload b and each sweep point, and
the engine must have produced the same greedy tokens as transformers. Speed itself is not asserted.
"""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "bench" / "e2e" / "bench_vs_transformers.py"


def _table_rows(text: str, first_cell: str) -> list[list[str]]:
    """Cells of the markdown rows after the header line that starts with ``| first_cell |``."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"| {first_cell} |"))
    width = lines[start].count("|")
    assert re.fullmatch(r"(\|---)+\|", lines[start + 1]), lines[start + 1]
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        assert line.count("|") == width, f"row with a missing or extra column: {line!r}"
        rows.append([c.strip() for c in line.strip("|").split("|")])
    return rows


def test_smoke_run_is_well_formed_and_tokens_match():
    done = subprocess.run([sys.executable, str(SCRIPT), "--smoke", "--threads", "1", "--ab-small-m-linear"], cwd=REPO,
                          capture_output=True, text=True, timeout=500)
    out = done.stdout
    assert done.returncode == 0, out[-3000:] + done.stderr[-3000:]

    serving = _table_rows(out, "workload")
    engines = {(r[0], r[1]) for r in serving}
    for workload in ("a", "b"):
        assert (workload, "qwen_ops LLM") in engines and (workload, "transformers, one at a time") in engines
    assert ("a", "transformers, batched (left pad)") in engines
    assert ("b", "qwen_ops LLM, F.linear") in engines
    for r in serving:
        requests, prompt_tok, output_tok = (int(x) for x in r[2:5])
        wall, tps, ttft, itl = (float(x) for x in r[5:9])
        assert requests > 0 and prompt_tok >= requests and output_tok > 0, r
        assert wall > 0 and tps > 0 and ttft > 0 and itl > 0, r
        # The rate is the row's own tokens over time. wall is printed to the millisecond, so the rate recomputed
        # from it is off by up to 0.5 ms / wall of itself besides (a 40 ms smoke run: 1.25 %).
        assert abs(tps - output_tok / wall) <= (0.01 + 0.0005 / wall) * tps + 0.1, r
        assert re.fullmatch(r"\d+\.\d\dx", r[9]), r
        assert r[10] in ("ref", "yes", "no"), r
        if r[1].startswith("qwen_ops LLM"):
            assert r[10] == "yes", f"the engine's greedy tokens differ from transformers': {r}"

    sweep = _table_rows(out, "batch")
    assert [int(r[0]) for r in sweep] == [1, 4]
    for r in sweep:
        assert float(r[1]) > 0 and float(r[2]) > 0 and r[4] == "yes", r
    floors = re.findall(r"^floor (.+?): batch=.* measured/floor (\d+\.\d+)$", out, re.M)
    assert [name for name, _ in floors] == ["b (qwen_ops LLM)", "b (qwen_ops LLM, F.linear)", "sweep b=1",
                                            "sweep b=4"], out
    assert all(float(ratio) > 0 for _, ratio in floors)
    assert "same greedy tokens, qwen_ops vs transformers one at a time: yes" in out
