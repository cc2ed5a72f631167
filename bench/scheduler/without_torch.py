"""Run a scheduler script with a stand-in `torch` module, so that valgrind need not import torch.

    VLLM_TARGET_DEVICE=cpu valgrind --tool=callgrind --toggle-collect=starmap_next --callgrind-out-file=/tmp/cg.out \\
        /work/vllm-venv/bin/python bench/scheduler/without_torch.py bench/scheduler/profile_step.py --what step ...

Importing torch under callgrind takes minutes on the shared machine; the scheduler uses torch only in
step_metadata.py, whose module level merely names torch types in annotations. The stand-in answers
every attribute with a placeholder, so those imports succeed; anything that really calls torch
(build_step_metadata, --vllm) fails loudly instead of measuring something else. Measured: the same
count with and without it (attention only, 256 requests: 4,774,327 and 4,773,436 instructions per step).
"""

import runpy
import sys
import types


class _Placeholder:
    """Whatever torch attribute a module level names (torch.Tensor, torch.Tensor | None, ...)."""

    def __getattr__(self, name):
        return _Placeholder()

    def __or__(self, other):
        return self

    def __ror__(self, other):
        return self

    def __call__(self, *args, **kwargs):
        raise RuntimeError("bench/scheduler/without_torch.py: this script calls torch; run it without the wrapper")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        raise SystemExit("usage: without_torch.py SCRIPT [ARGS...]")
    stand_in = types.ModuleType("torch")
    stand_in.__getattr__ = lambda name: _Placeholder()
    sys.modules["torch"] = stand_in
    script, sys.argv = sys.argv[1], sys.argv[1:]
    runpy.run_path(script, run_name="__main__")
