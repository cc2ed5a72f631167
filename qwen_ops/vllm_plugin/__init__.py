"""qwen_ops as a vLLM plug-in: Qwen3.5's GDN and full-attention layers on ``torch.ops.qwen_ops.*``.

Installed with ``pip install qwen_ops[vllm]``; vLLM finds :func:`register`
through the ``vllm.general_plugins`` entry point and calls it in every one of
its processes (front end, engine core, workers). What it hooks:

* the GDN layer: ``PluggableLayer.register_oot`` replaces vLLM's
  ``QwenGatedDeltaNetAttention`` with :class:`.gdn_layer.QwenOpsGatedDeltaNet`
  (same weights and projections; the conv + gated-delta-rule core runs on
  ``causal_conv1d_fn/update``, ``fused_gdn_gating``,
  ``chunk_gated_delta_rule`` / ``fused_recurrent_gated_delta_rule``);
* full attention: ``register_backend(AttentionBackendEnum.CPU_ATTN, ...)``
  points vLLM's CPU attention backend at :mod:`.attention_backend`
  (``reshape_and_cache`` + ``mixed_attention`` over vLLM's block tables);
* ``kv_cache_dtype="int8"``: registered with vLLM's
  ``register_kv_cache_dtype`` as a dtype the backend owns (per-channel
  symmetric INT8, the project's scheme);
* on the CPU only: the few ``torch.ops._C`` helpers that vLLM's CUDA wheel
  lacks (:mod:`.cpu_standins`), each announced in the log.

``QWEN_OPS_VLLM_PLUGIN=0`` turns all of it off (stock vLLM). Any other vLLM
version than :data:`.version.SUPPORTED_VLLM_VERSION` is refused.
"""
from __future__ import annotations

import logging
import os

from .version import SUPPORTED_VLLM_VERSION, check_vllm_version

logger = logging.getLogger("qwen_ops.vllm_plugin")

ENV_SWITCH = "QWEN_OPS_VLLM_PLUGIN"
_registered = False


def plugin_enabled() -> bool:
    """False when ``QWEN_OPS_VLLM_PLUGIN`` is 0/false/off/no (case-insensitive)."""
    return os.environ.get(ENV_SWITCH, "1").strip().lower() not in ("0", "false", "off", "no")


def _log(msg: str, *args) -> None:
    # vLLM configures its own "vllm" logger; route through it so the lines show in vLLM's log.
    from vllm.logger import init_logger

    init_logger("vllm.qwen_ops_plugin").info(msg, *args)


def register() -> None:
    """The ``vllm.general_plugins`` entry point. Safe to call more than once per process."""
    global _registered
    if _registered:
        return
    if not plugin_enabled():
        _log("qwen_ops plug-in: disabled by %s=%s, stock vLLM is running", ENV_SWITCH, os.environ[ENV_SWITCH])
        _registered = True
        return
    check_vllm_version()
    from vllm.platforms import current_platform

    from . import attention_backend, gdn_layer, int8_kv

    if current_platform.is_cpu():
        from . import cpu_standins

        cpu_standins.install()
    int8_kv.register_int8_kv_cache_dtype()
    gdn_layer.register_gdn_layer()
    attention_backend.register_attention_backend()
    _registered = True
    _log("qwen_ops plug-in: active for vLLM %s (GDN layer, attention backend CPU_ATTN, kv_cache_dtype int8); "
         "%s=0 turns it off", SUPPORTED_VLLM_VERSION, ENV_SWITCH)


__all__ = ["register", "plugin_enabled", "ENV_SWITCH", "SUPPORTED_VLLM_VERSION"]
