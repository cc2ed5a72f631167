"""OpenMP's wait policy for the CPU path: PASSIVE unless the user chose one (issue 15, threads).

torch's CPU ops (and MKL's sgemm, and ``qwen_ops::small_m_linear``) run their parallel regions on
libgomp's thread pool. By default a libgomp thread that reaches the end of a region spins for a while
before it sleeps. On a machine where another process competes for the cores, a spinning thread keeps
its core busy while the thread the region waits for sits descheduled behind the competitor, so every
region can cost a scheduler tick; a decode step runs hundreds of regions. With
``OMP_WAIT_POLICY=PASSIVE`` the waiting thread sleeps at once, its core goes idle and the scheduler
moves the late thread there. Measured on the project's shared 2-core machine (bench/RESULTS.md,
``bench/e2e/bench_contention.py``), the 0.8B-shaped engine and transformers both ran several times
faster under the machine's own load with PASSIVE, and slowed down less under one more competitor.

libgomp reads the variable once, when it is loaded (when torch is first imported), so it is set here,
at ``import qwen_ops``, before qwen_ops imports torch, and only if:

* ``OMP_WAIT_POLICY`` is not already set (a user's value, ``ACTIVE`` or ``PASSIVE``, always wins), and
* ``QWEN_OPS_OMP_WAIT_POLICY`` is not ``default`` (that value leaves libgomp's own spin-then-sleep
  behaviour; any other value of it, e.g. ``ACTIVE``, is what qwen_ops sets instead of PASSIVE).

If torch was imported before qwen_ops, libgomp has already read its environment: nothing is changed
(not even the variable, which would otherwise reach child processes and disagree with this one), and
``wait_policy()`` says so. No torch import here.
"""
from __future__ import annotations

import os
import sys

WAIT_POLICY_ENV = "OMP_WAIT_POLICY"
QWEN_OPS_POLICY_ENV = "QWEN_OPS_OMP_WAIT_POLICY"
DEFAULT_POLICY = "PASSIVE"

_decision = "not applied yet"


def apply_default_wait_policy() -> str:
    """Set ``OMP_WAIT_POLICY`` for this process as the module docstring says; returns what was decided."""
    global _decision
    chosen = os.environ.get(QWEN_OPS_POLICY_ENV, DEFAULT_POLICY)
    if WAIT_POLICY_ENV in os.environ:
        _decision = f"{WAIT_POLICY_ENV}={os.environ[WAIT_POLICY_ENV]} (set by the user)"
    elif chosen.lower() == "default":
        _decision = f"libgomp's default ({QWEN_OPS_POLICY_ENV}=default)"
    elif "torch" in sys.modules:
        _decision = (f"libgomp's default (torch was imported before qwen_ops, so {WAIT_POLICY_ENV} could not be "
                     f"set in time; set it before starting Python)")
    else:
        os.environ[WAIT_POLICY_ENV] = chosen.upper()
        _decision = f"{WAIT_POLICY_ENV}={chosen.upper()} (set by qwen_ops)"
    return _decision


def wait_policy() -> str:
    """The OpenMP wait policy this process runs with, and who chose it (one line, for logs and benchmarks)."""
    return _decision
