"""The compiler checks live in bench/toolchains/ (scripts, not a package): their folder goes on sys.path,
and so does this one (broken_kernel.py).

Each check's summary line (``ascendc real headers: K/N kernels compile``, ``sm_90: K/N kernels compile;
spills in M``, or its SKIPPED line with the reason) is printed at the end of the pytest run, in its own
section, so the README's test command (and CI, which runs it) shows them even with ``-q``. The third
summary, triton-ascend's front end, is printed by ``.ci/triton_ascend_check`` itself.
"""
import os
import sys

import pytest

TOOLCHAINS = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "bench",
                          "toolchains")
sys.path.insert(0, TOOLCHAINS)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

_SUMMARIES: list[str] = []


@pytest.fixture
def toolchain_summary():
    """Call it with a check's summary line; the line is printed at the end of the run."""
    return _SUMMARIES.append


def pytest_terminal_summary(terminalreporter):
    if _SUMMARIES:
        terminalreporter.section("toolchain checks")
        for line in _SUMMARIES:
            terminalreporter.write_line(line)
