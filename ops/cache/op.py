"""``reshape_and_cache``: the public op, its checks and its torch.library entry."""
from __future__ import annotations

from typing import Optional

import torch

from .. import _validate as check
from .._backend import dispatch
from .._library import custom_op
from . import reference

OP = "reshape_and_cache"


def _check(key, value, key_cache, value_cache, slot_mapping, k_scale, v_scale, *, values: bool,
           real: bool = True) -> None:
    nb, hkv, bs, d = check.kv_cache_pair(OP, key_cache, value_cache)
    check.tensor(OP, "key", key, dtypes=check.FLOAT_DTYPES, ndim=3, layout="[T, Hkv, D]")
    t = key.shape[0]
    # key against the cache first, so that a key/value pair with the wrong heads blames 'key'.
    check.head_dims(OP, **{"key heads": key.shape[1], "key_cache heads": hkv})
    check.head_dims(OP, **{"key head dim": key.shape[2], "key_cache head dim": d})
    check.tensor(OP, "value", value, dtypes=check.FLOAT_DTYPES, shape=(t, hkv, d), layout=f"[T, Hkv, D] = [{t}, {hkv}, {d}]")
    check.same_dtype(OP, key=key, value=value)
    if key_cache.dtype != torch.int8:
        check.same_dtype(OP, key=key, key_cache=key_cache)
    check.tensor(OP, "slot_mapping", slot_mapping, dtypes=check.INDEX_DTYPES, shape=(t,), layout="[T]")
    check.same_device(OP, key=key, value=value, key_cache=key_cache, value_cache=value_cache,
                      slot_mapping=slot_mapping, k_scale=k_scale, v_scale=v_scale)
    check.kv_scales(OP, key_cache.dtype, k_scale, v_scale, hkv, d, values=values)
    check.indices(OP, "slot_mapping", slot_mapping, nb * bs, allow_padding=True, values=values)
    if real:  # fake tensors have no addresses (reading one is no sync)
        check.disjoint(OP, "key_cache", key_cache, "value_cache", value_cache)


@custom_op(OP, mutates_args=("key_cache", "value_cache"))
def _op(key: torch.Tensor, value: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor,
        slot_mapping: torch.Tensor, k_scale: Optional[torch.Tensor], v_scale: Optional[torch.Tensor],
        backend: Optional[str]) -> None:
    _check(key, value, key_cache, value_cache, slot_mapping, k_scale, v_scale,
           values=check.values_checked(key.device))
    dispatch(OP, backend, key.device, key=key, value=value, key_cache=key_cache, value_cache=value_cache,
             slot_mapping=slot_mapping, k_scale=k_scale, v_scale=v_scale)


@_op.register_fake
def _fake(key, value, key_cache, value_cache, slot_mapping, k_scale, v_scale, backend):
    _check(key, value, key_cache, value_cache, slot_mapping, k_scale, v_scale, values=False, real=False)


def reshape_and_cache(key, value, key_cache, value_cache, slot_mapping, k_scale=None, v_scale=None,
                      *, backend: str | None = None) -> None:
    """Write the step's new keys and values into the paged cache, in place.

    Args:
        key, value: [T, Hkv, D], float16/bfloat16/float32 (same dtype).
        key_cache, value_cache: [NB, Hkv, Bs, D] paged BNSD caches, contiguous
            and not overlapping in memory; float (same dtype as ``key``) or int8.
        slot_mapping: [T] int32/int64; token t goes to block ``slot // Bs``,
            row ``slot % Bs``. -1 marks padding (not written). Slots are unique.
        k_scale, v_scale: float32 [Hkv, D], finite and > 0, required for int8 caches and
            forbidden otherwise. INT8 stores
            ``clamp(round_half_to_even(x / scale), -128, 127)``; non-finite
            quotients are defined: NaN is stored as 0, +inf as 127, -inf as
            -128. Float caches copy NaN and +-inf unchanged.
        backend: "torch", "triton", "ascendc" or None (see ``qwen_ops.ops``).

    Nothing is written when validation fails.
    """
    torch.ops.qwen_ops.reshape_and_cache(key, value, key_cache, value_cache, slot_mapping,
                                         k_scale, v_scale, backend)


def kv_scales_from_absmax(x: torch.Tensor) -> torch.Tensor:
    """Per-channel symmetric INT8 scales for calibration.

    Args:
        x: [..., Hkv, D] samples of keys or values (any float dtype).
    Returns:
        float32 [Hkv, D]: ``max |x| / 127`` over all leading dims, floored at 1e-8.
    Raises:
        TypeError/ValueError if ``x`` is not a float tensor, has fewer than 2
        dims, is empty or holds inf/nan.
    """
    check.tensor("kv_scales_from_absmax", "x", x, dtypes=check.FLOAT_DTYPES)
    if x.dim() < 2 or x.numel() == 0:
        raise ValueError(f"kv_scales_from_absmax: argument 'x' must be a non-empty [..., Hkv, D], "
                         f"got shape {tuple(x.shape)}")
    if not bool(torch.isfinite(x).all()):
        # An inf or nan sample would make a scale that turns every cached value into nan.
        raise ValueError("kv_scales_from_absmax: argument 'x' must be finite (it holds inf or nan)")
    amax = x.detach().abs().to(torch.float32).reshape(-1, *x.shape[-2:]).amax(dim=0)
    return (amax / 127.0).clamp_min(1e-8)


def _check_scale_for(op: str, x_name: str, x: torch.Tensor, scale) -> None:
    if x.dim() < 2:
        raise ValueError(f"{op}: argument '{x_name}' must be [..., Hkv, D], got shape {tuple(x.shape)}")
    check.int8_scale(op, "scale", scale, *x.shape[-2:])
    check.same_device(op, **{x_name: x, "scale": scale})


def quantize_int8(x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """Symmetric per-channel INT8, exactly as ``reshape_and_cache`` stores it.

    Args:
        x: [..., Hkv, D] float16/bfloat16/float32.
        scale: float32 [Hkv, D], finite and > 0.
    Returns:
        int8 [..., Hkv, D]: ``clamp(round_half_to_even(x / scale), -128, 127)``
        (NaN -> 0, +inf -> 127, -inf -> -128).
    """
    check.tensor("quantize_int8", "x", x, dtypes=check.FLOAT_DTYPES)
    _check_scale_for("quantize_int8", "x", x, scale)
    return reference.quantize_int8(x, scale)


def dequantize_int8(q: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """Inverse of ``quantize_int8``: ``q * scale`` in float32.

    Args:
        q: int8 [..., Hkv, D]. scale: float32 [Hkv, D], finite and > 0.
    Returns:
        float32 [..., Hkv, D].
    """
    check.tensor("dequantize_int8", "q", q, dtypes=(torch.int8,))
    _check_scale_for("dequantize_int8", "q", q, scale)
    return reference.dequantize_int8(q, scale)
