"""The trace tool: the twelve-token example of docs/scheduler.md and its plot."""

import subprocess
import sys

import pytest

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


def _run(*args):
    return subprocess.run([sys.executable, "-m", "qwen_ops.scheduling.trace", *args], capture_output=True, text=True)


@pytest.mark.parametrize(
    "args, name",
    [
        (["--prompts", ",,", "--budget", "4"], "--prompts"),
        (["--prompts", "3", "--arrivals", "0", "--budget", "4"], "--arrivals"),
        (["--prompts", "3,4", "--outputs", "1,2,3", "--budget", "4"], "--outputs"),
        (["--prompts", "3", "--budget", "4", "--max-steps", "0"], "--max-steps"),
    ],
)
def test_bad_arguments_exit_2_with_an_error_line(args, name, capsys):
    with pytest.raises(SystemExit) as exit_info:
        status = main(args)
        raise SystemExit(status)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "error:" in err and name in err and "Traceback" not in err


@pytest.mark.parametrize("name", ["missing-folder/trace.png", "trace.unknownext"])
def test_an_unwritable_plot_is_an_error_not_a_traceback(tmp_path, name):
    result = _run(*README_EXAMPLE, "--plot", str(tmp_path / name))
    assert result.returncode == 2
    assert "error: cannot write --plot" in result.stderr and "Traceback" not in result.stderr


def test_a_run_cut_by_max_steps_says_so(capsys):
    assert main(["--prompts", "30", "--budget", "4", "--max-steps", "2"]) == 0
    captured = capsys.readouterr()
    assert len(captured.out.splitlines()) == 3  # header and two steps
    assert "note: stopped at --max-steps 2" in captured.err
    assert main(README_EXAMPLE) == 0
    assert "note:" not in capsys.readouterr().err


HYBRID_EXAMPLE = ["--gdn-groups", "3", "--prefix-caching", "--prompts", "50,50,60", "--shared-prefix", "40",
                  "--arrivals", "1,4,8", "--outputs", "2", "--budget", "64", "--block-size", "16"]


def test_hybrid_align_example_shows_aligned_chunks_and_hits(capsys):
    assert main(HYBRID_EXAMPLE) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].endswith("gdn_groups=3 gdn_mode=align")
    assert lines[1].startswith("step   1 | a: prefill 48 (48/50) aligned |")  # not 50: the state at 48 is cached
    assert lines[2].startswith("step   2 | a: prefill 2 (50/50) |")
    # b shares 40 tokens: attention hits 32, but no GDN state there, so b stops at the junction.
    assert lines[4].startswith("step   4 | b: prefill 32 (32/50) aligned |")
    assert lines[8].startswith("step   8 | c: prefill 16 (48/60) hit 32 aligned |")
    assert lines[8].endswith("PrefillCacheHit")
