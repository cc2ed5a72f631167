"""The trace tool: the README's twelve-token example and its plot."""

import subprocess
import sys

from qwen_ops.scheduling.trace import main

README_EXAMPLE = ["--decoding", "4", "--prompts", "12", "--outputs", "3", "--budget", "6"]


def test_twelve_token_example(capsys):
    assert main(README_EXAMPLE) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("qwen_ops scheduler: max_num_batched_tokens=6")
    assert lines[1].startswith("step   1 | d0: decode 1, a: prefill 5 (5/12) | budget 6/6 |")
    assert lines[1].endswith("ChunkedPrefill")
    assert lines[3].startswith("step   3 | d0: decode 1, a: prefill 2 (12/12) | budget 3/6")
    assert "DecodeOnly" in lines[4]


def test_plot_is_written(tmp_path):
    path = tmp_path / "trace.png"
    assert main(README_EXAMPLE + ["--plot", str(path)]) == 0
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_preemption_shows_in_the_trace(capsys):
    args = ["--prompts", "8,8", "--outputs", "8", "--budget", "16", "--block-size", "4", "--blocks", "6",
            "--max-num-seqs", "2"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "preempted b" in out


def test_bad_arguments_are_reported():
    result = subprocess.run([sys.executable, "-m", "qwen_ops.scheduling.trace", "--prompts", "x", "--budget", "4"],
                            capture_output=True, text=True)
    assert result.returncode == 2 and "--prompts" in result.stderr
