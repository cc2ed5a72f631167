"""Every test runs under a time limit (pytest-timeout, configured in pyproject.toml).

A scheduler bug once made a test loop forever instead of failing; with the
limit such a test fails with ``Timeout`` and the rest of the suite runs.
"""
import subprocess
import sys


def test_every_test_has_a_time_limit(request):
    assert request.config.pluginmanager.hasplugin("timeout"), "pytest-timeout is part of the `test` extra"
    limit = float(request.config.getini("timeout"))
    assert 60 <= limit <= 3600, f"the suite's per-test limit is {limit} s"


def test_a_hanging_test_fails_instead_of_stalling(tmp_path):
    """A test that never returns is stopped at its limit and reported failed; the next test still runs."""
    (tmp_path / "test_hang.py").write_text(
        "import time\n\n\n"
        "def test_hangs():\n    while True:\n        time.sleep(0.05)\n\n\n"
        "def test_after():\n    assert True\n")
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--timeout=2",
                           str(tmp_path / "test_hang.py")], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stdout[-2000:]
    assert "Timeout" in done.stdout and "1 failed, 1 passed" in done.stdout, done.stdout[-2000:]
