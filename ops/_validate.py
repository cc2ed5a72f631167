"""Argument checks shared by every op.

Each op validates shapes, dtypes and metadata *before* any implementation
touches memory, so that a bad call raises a ``ValueError``/``TypeError`` that
names the argument and leaves every cache and state pool untouched.

``values=False`` restricts a check to what is known without reading tensor
data (shapes, dtypes, devices); the fake (meta) implementations used by
``torch.compile`` call the checks that way.

When values are read (``values_checked``). Reading a value of a device tensor
(``int(t.min())``, ``bool(...)``, ``torch.unique``) is a host-device
synchronisation, and an engine step calls the ops in every layer; it also
makes graph capture (CUDA graphs, aclgraph) impossible. So a public op always
checks shapes, dtypes and devices, and checks values:

* always when its tensors are on the CPU (reading them is free);
* on a device only when the environment variable ``QWEN_OPS_CHECK_VALUES`` is
  ``1`` (the test suite sets it);
* never inside ``trusted_metadata()``: an engine enters it after checking the
  step's metadata once on the host, before it moved to the device (see
  ``qwen_ops.scheduling.StepMetadata.validate``).
"""
from __future__ import annotations

import contextlib
import os
import threading
from typing import Iterable, Iterator, Sequence

import torch

# Set to "1" to check metadata values of ops called on a device (off by default: each check syncs).
CHECK_VALUES_ENV = "QWEN_OPS_CHECK_VALUES"

_trust = threading.local()


@contextlib.contextmanager
def trusted_metadata() -> Iterator[None]:
    """Within this block, ops check no metadata values (shapes, dtypes and devices still are).

    For engines only, after they checked the step's metadata (block tables,
    slot mappings, lengths, state indices, KV scales) themselves; a bad value
    passed in here is undefined behaviour on a device. Nests; per thread.
    """
    depth = getattr(_trust, "depth", 0)
    _trust.depth = depth + 1
    try:
        yield
    finally:
        _trust.depth = depth


def values_checked(device: torch.device) -> bool:
    """Whether an op called with tensors on ``device`` checks metadata values now (policy above)."""
    if getattr(_trust, "depth", 0):
        return False
    if device.type == "cpu":
        return True
    return os.environ.get(CHECK_VALUES_ENV, "0") == "1"

FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
CACHE_DTYPES = FLOAT_DTYPES + (torch.int8,)
INDEX_DTYPES = (torch.int32, torch.int64)


def _names(dtypes: Iterable[torch.dtype]) -> str:
    return ", ".join(str(d).replace("torch.", "") for d in dtypes)


def tensor(
    op: str,
    name: str,
    t,
    *,
    dtypes: Sequence[torch.dtype] | None = None,
    ndim: int | None = None,
    shape: Sequence[int | None] | None = None,
    layout: str = "",
) -> torch.Tensor:
    """Check that ``t`` is a tensor of the given dtype, rank and shape.

    ``shape`` entries of ``None`` are free. ``layout`` (e.g. "[T, Hkv, D]") is
    only used in the message.
    """
    where = f"{op}: argument '{name}'"
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{where} must be a torch.Tensor {layout}, got {type(t).__name__}")
    if dtypes is not None and t.dtype not in dtypes:
        raise TypeError(f"{where} must have dtype in ({_names(dtypes)}), got {t.dtype}")
    if shape is not None:
        ndim = len(shape)
    if ndim is not None and t.dim() != ndim:
        raise ValueError(f"{where} must be {ndim}-D {layout}, got shape {tuple(t.shape)}")
    if shape is not None:
        for axis, (got, want) in enumerate(zip(t.shape, shape)):
            if want is not None and got != want:
                raise ValueError(
                    f"{where} must have shape {layout or tuple(shape)} "
                    f"(dim {axis} = {want}), got {tuple(t.shape)}"
                )
    return t


def optional(op: str, name: str, t, **kwargs) -> torch.Tensor | None:
    return None if t is None else tensor(op, name, t, **kwargs)


def same_device(op: str, **tensors: torch.Tensor | None) -> torch.device:
    device = None
    first = None
    for name, t in tensors.items():
        if t is None:
            continue
        if device is None:
            device, first = t.device, name
        elif t.device != device:
            raise ValueError(
                f"{op}: argument '{name}' is on {t.device} but '{first}' is on {device}; "
                "all tensors must be on one device"
            )
    return device


def same_dtype(op: str, **tensors: torch.Tensor | None) -> None:
    first = None
    for name, t in tensors.items():
        if t is None:
            continue
        if first is None:
            first = (name, t.dtype)
        elif t.dtype != first[1]:
            raise TypeError(
                f"{op}: argument '{name}' has dtype {t.dtype} but '{first[0]}' has {first[1]}; they must match"
            )


def head_dims(op: str, **dims: int) -> None:
    """All named head dims must be equal (e.g. query D vs cache D)."""
    items = list(dims.items())
    for name, value in items[1:]:
        if value != items[0][1]:
            raise ValueError(
                f"{op}: head dims disagree: {items[0][0]} = {items[0][1]} but {name} = {value}"
            )


def gqa(op: str, num_q_heads: int, num_kv_heads: int, q_name="query", kv_name="key_cache") -> int:
    if num_kv_heads <= 0 or num_q_heads % num_kv_heads != 0:
        raise ValueError(
            f"{op}: the number of heads of '{q_name}' ({num_q_heads}) must be a multiple of "
            f"the number of heads of '{kv_name}' ({num_kv_heads})"
        )
    return num_q_heads // num_kv_heads


def nonempty_dim(op: str, name: str, t: torch.Tensor, axis: int, what: str) -> None:
    """Dimension ``axis`` of ``t`` must be >= 1 (a zero head dim or block size would divide by zero)."""
    if t.shape[axis] < 1:
        raise ValueError(f"{op}: argument '{name}' must have {what} >= 1 (dim {axis}), got shape {tuple(t.shape)}")


def kv_cache_pair(op: str, key_cache, value_cache) -> tuple[int, int, int, int]:
    """Check a paged BNSD cache pair [NB, Hkv, Bs, D]; return (NB, Hkv, Bs, D)."""
    tensor(op, "key_cache", key_cache, dtypes=CACHE_DTYPES, ndim=4, layout="[NB, Hkv, Bs, D]")
    nonempty_dim(op, "key_cache", key_cache, 2, "block size Bs")
    nonempty_dim(op, "key_cache", key_cache, 3, "head dim D")
    tensor(op, "value_cache", value_cache, dtypes=CACHE_DTYPES, shape=tuple(key_cache.shape),
           layout="[NB, Hkv, Bs, D] (same as key_cache)")
    same_dtype(op, key_cache=key_cache, value_cache=value_cache)
    if not (key_cache.is_contiguous() and value_cache.is_contiguous()):
        raise ValueError(f"{op}: 'key_cache' and 'value_cache' must be contiguous")
    return tuple(key_cache.shape)


def disjoint(op: str, a_name: str, a: torch.Tensor, b_name: str, b: torch.Tensor) -> None:
    """Two contiguous tensors that an op writes must not share memory (one write would clobber the other)."""
    a_start, b_start = a.data_ptr(), b.data_ptr()
    a_end = a_start + a.numel() * a.element_size()
    b_end = b_start + b.numel() * b.element_size()
    if a.numel() and b.numel() and a_start < b_end and b_start < a_end:
        raise ValueError(f"{op}: arguments '{a_name}' and '{b_name}' share memory; they must be separate tensors")


def int8_scale(op: str, name: str, s, num_kv_heads: int, head_dim: int, *, values: bool = True) -> None:
    """A per-channel INT8 scale: float32 [Hkv, D], finite and > 0 everywhere."""
    tensor(op, name, s, dtypes=(torch.float32,), shape=(num_kv_heads, head_dim),
           layout=f"[Hkv, D] = [{num_kv_heads}, {head_dim}]")
    # inf would dequantize 0 * inf = nan: reject it with the non-positive ones.
    if values and not bool((torch.isfinite(s) & (s > 0)).all()):
        raise ValueError(f"{op}: argument '{name}' must be finite and > 0 everywhere")


def kv_scales(op: str, cache_dtype: torch.dtype, k_scale, v_scale, num_kv_heads: int, head_dim: int,
              *, values: bool = True) -> None:
    """INT8 caches need float32 [Hkv, D] scales, finite and > 0; float caches take none."""
    if cache_dtype == torch.int8:
        for name, s in (("k_scale", k_scale), ("v_scale", v_scale)):
            if s is None:
                raise ValueError(f"{op}: an int8 KV cache needs '{name}' (float32 [Hkv, D] = [{num_kv_heads}, {head_dim}])")
            int8_scale(op, name, s, num_kv_heads, head_dim, values=values)
    else:
        for name, s in (("k_scale", k_scale), ("v_scale", v_scale)):
            if s is not None:
                raise ValueError(
                    f"{op}: argument '{name}' was given but the KV cache is {cache_dtype}; "
                    "scales are only for int8 caches"
                )


def lengths(op: str, name: str, t: torch.Tensor, *, values: bool = True, upper: int | None = None,
            upper_what: str = "") -> None:
    """A 1-D index tensor of lengths: every entry >= 0 (and <= upper)."""
    if not values or t.numel() == 0:
        return
    lo = int(t.min())
    if lo < 0:
        raise ValueError(f"{op}: argument '{name}' must be >= 0, got {lo}")
    if upper is not None:
        hi = int(t.max())
        if hi > upper:
            raise ValueError(f"{op}: argument '{name}' has {hi} > {upper} {upper_what}".rstrip())


def cumulative(op: str, name: str, t: torch.Tensor, total: int, *, values: bool = True) -> None:
    """[N+1] offsets: start at 0, non-decreasing, end at ``total``."""
    if t.numel() < 1:
        raise ValueError(f"{op}: argument '{name}' must have N+1 >= 1 entries")
    if not values:
        return
    if int(t[0]) != 0:
        raise ValueError(f"{op}: argument '{name}' must start at 0, got {int(t[0])}")
    if int(t[-1]) != total:
        raise ValueError(f"{op}: argument '{name}' must end at the number of tokens T = {total}, got {int(t[-1])}")
    if t.numel() > 1 and bool((t[1:] < t[:-1]).any()):
        raise ValueError(f"{op}: argument '{name}' must be non-decreasing")


def block_table(op: str, block_tables: torch.Tensor, needed_tokens: torch.Tensor, num_blocks: int,
                block_size: int, *, values: bool = True, lens_name: str = "seq_lens") -> None:
    """Blocks that will be read (the first ceil(len / Bs) of each row) must be in [0, NB)."""
    # An empty table ([N, 0]) is fine only if no tokens are read: the capacity
    # check must run before any early return.
    if not values or needed_tokens.numel() == 0:
        return
    max_blocks = block_tables.shape[1]
    need = (needed_tokens.to(torch.int64) + block_size - 1) // block_size
    if int(need.max()) > max_blocks:
        worst = int(needed_tokens.max())
        raise ValueError(
            f"{op}: argument '{lens_name}' has {worst} tokens but 'block_tables' holds at most "
            f"{max_blocks} blocks of {block_size} = {max_blocks * block_size} tokens per request"
        )
    used = torch.arange(max_blocks, device=block_tables.device)[None, :] < need[:, None].to(block_tables.device)
    ids = block_tables[used]
    if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= num_blocks):
        bad = ids[(ids < 0) | (ids >= num_blocks)][0]
        raise ValueError(f"{op}: argument 'block_tables' has block id {int(bad)} outside [0, {num_blocks})")


def indices(op: str, name: str, t: torch.Tensor, size: int, *, allow_padding: bool, values: bool = True) -> None:
    """Indices into a pool of ``size`` rows; -1 allowed as padding if ``allow_padding``."""
    if not values or t.numel() == 0:
        return
    lo = -1 if allow_padding else 0
    bad = (t < lo) | (t >= size)
    if bool(bad.any()):
        raise ValueError(
            f"{op}: argument '{name}' has index {int(t[bad][0])} outside "
            f"[{lo}, {size})" + (" (-1 marks padding)" if allow_padding else "")
        )
    valid = t[t >= 0]
    if valid.numel() != torch.unique(valid).numel():
        raise ValueError(f"{op}: argument '{name}' repeats an index; each row may be written by one sequence only")
