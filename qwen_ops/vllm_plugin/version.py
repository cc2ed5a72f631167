"""The one vLLM release this plug-in is written against.

The hooks use vLLM internals (the GDN layer's attributes and metadata, the
attention backend interface, the KV-cache view layout) that change between
releases, so any other version is refused instead of failing somewhere deep
inside a forward pass.
"""
from __future__ import annotations

SUPPORTED_VLLM_VERSION = "0.33.0"


class UnsupportedVLLMVersion(RuntimeError):
    pass


def check_vllm_version(installed: str | None = None) -> None:
    """Raise :class:`UnsupportedVLLMVersion` unless vLLM is exactly ``SUPPORTED_VLLM_VERSION``.

    ``installed`` defaults to ``vllm.__version__``; a local build suffix
    (``0.33.0+cpu``) is accepted, a different release is not.
    """
    if installed is None:
        import vllm

        installed = vllm.__version__
    release = installed.split("+", 1)[0]
    if release != SUPPORTED_VLLM_VERSION:
        raise UnsupportedVLLMVersion(
            f"qwen_ops vLLM plug-in supports vLLM {SUPPORTED_VLLM_VERSION} only, found vLLM {installed}: "
            f"install `vllm=={SUPPORTED_VLLM_VERSION}` (pip install qwen_ops[vllm]) or set "
            f"QWEN_OPS_VLLM_PLUGIN=0 to run stock vLLM without the plug-in")
