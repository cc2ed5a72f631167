"""The CPU-side logic of ``bench/device_check.{sh,py}``, the prepared check for a lent GPU.

The script cannot run its real job here (no GPU); ``--cpu`` runs the same
code under the Triton interpreter with tiny shapes, which is what these tests
exercise: every op is checked and timed, the tables are printed, the JSON is
written, and a wrong kernel output is reported as a failure.
"""
import importlib.util
import json
import os
import subprocess
import sys

import pytest
import torch

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _load_script():
    spec = importlib.util.spec_from_file_location("device_check", os.path.join(REPO, "bench", "device_check.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


device_check = _load_script()


@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="the dry run needs the Triton interpreter")
def test_dry_run_checks_and_times_every_op(tmp_path, capsys):
    out = tmp_path / "result.json"
    status = device_check.main(["--cpu", "--json", str(out)])
    printed = capsys.readouterr().out
    result = json.loads(out.read_text())
    failures = [c for c in result["checks"] if not c["ok"]]
    assert failures == [] and status == 0
    assert {c["op"] for c in result["checks"]} == set(device_check.ALL_OPS)
    timed = {t["op"] for t in result["timings"] if t["ms"] is not None}
    assert timed == set(device_check.ALL_OPS)
    assert result["ceilings"]["copy_GBps"] > 0 and result["ceilings"]["matmul_TFLOPs"] > 0
    assert "== correctness" in printed and "== speed" in printed


def test_compare_reports_a_wrong_output():
    """The check must fail when the kernel is off by more than the tolerance, or not finite."""
    import tolerances

    ctx = device_check.Ctx(torch, None, cpu=True)
    gen = torch.Generator().manual_seed(5)
    ref = torch.randn(4, 8, generator=gen)
    assert device_check.compare(ctx, tolerances, "op", "case", torch.float32, [ref.clone()], [ref]).ok
    wrong = ref.clone()
    wrong[1, 2] += 1e-2
    check = device_check.compare(ctx, tolerances, "op", "case", torch.float32, [wrong], [ref])
    assert not check.ok and "1 of 32" in check.note
    wrong[1, 2] = float("nan")
    assert not device_check.compare(ctx, tolerances, "op", "case", torch.float32, [wrong], [ref]).ok
    assert not device_check.compare(ctx, tolerances, "op", "case", torch.float32, [ref[:2]], [ref]).ok


def test_unknown_op_is_rejected():
    with pytest.raises(SystemExit):
        device_check.parse_args(["--ops", "no_such_op"])


@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="the dry run needs the Triton interpreter")
def test_shell_wrapper_with_worker_processes(tmp_path):
    """bench/device_check.sh: runs the script, keeps its log and JSON under $OUT, passes its status on;
    ``--jobs 2`` checks the ops in worker processes, as on the GPU (two cheap ops keep it short)."""
    env = dict(os.environ, PYTHON=sys.executable, OUT=str(tmp_path))
    ops = "fused_gdn_gating,reshape_and_cache"
    done = subprocess.run(["bash", os.path.join(REPO, "bench", "device_check.sh"), "--cpu", "--jobs", "2", "--ops", ops],
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "device check PASSED" in done.stdout
    assert "worker fused_gdn_gating done" in done.stdout and "worker reshape_and_cache done" in done.stdout
    result = json.loads((tmp_path / "device_check.json").read_text())
    assert {c["op"] for c in result["checks"]} == set(ops.split(","))
    assert all(c["ok"] for c in result["checks"])
    assert (tmp_path / "device_check.log").read_text().count("fused_gdn_gating") >= 3


def test_warm_up_slices_cover_every_config_once():
    """The warm-up workers of one op compile disjoint shares of each autotune list, together all of it."""
    from qwen_ops.ops.conv import triton as conv_triton

    kernel = conv_triton._causal_conv1d_fn_kernel  # 11 configs
    everything = list(kernel.cuda_configs)
    try:
        shares = []
        for i in range(5):
            device_check.set_autotuning([kernel], full=True, config_slice=(i, 5))
            shares.append(list(kernel.cuda_configs))
        assert sorted(map(repr, sum(shares, []))) == sorted(map(repr, everything))
        device_check.set_autotuning([kernel], full=True, config_slice=(20, 21))  # an empty share: the first
        assert kernel.cuda_configs == everything[:1]
        device_check.set_autotuning([kernel], full=False)
        assert kernel.cuda_configs == everything[:1]
    finally:
        device_check.set_autotuning([kernel], full=True)
    assert kernel.cuda_configs == everything
