"""qwen_ops: kernels, a token-budget scheduler and a Qwen3.5 model for Ascend NPUs.

* ``qwen_ops.ops``: the ops (torch reference, Triton, Ascend C backends)
* ``qwen_ops.scheduling``: the vLLM-V1-style token-budget scheduler
* ``qwen_ops.model``: the Qwen3.5 model, the ``LLM`` engine and ``qwen-generate``
"""
# Before anything imports torch: libgomp reads OMP_WAIT_POLICY once, when torch loads it (openmp_policy.py).
from .openmp_policy import apply_default_wait_policy, wait_policy  # noqa: F401

apply_default_wait_policy()

from . import ops  # noqa: F401,E402

__version__ = "0.1.0"


def __getattr__(name):
    # The engine pulls in the model and tokenizer: load it only when asked for.
    if name in ("LLM", "SamplingParams", "RequestOutput"):
        from .model.engine import llm

        return getattr(llm, name)
    raise AttributeError(f"module 'qwen_ops' has no attribute {name!r}")
