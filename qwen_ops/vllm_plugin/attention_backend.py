"""vLLM attention backend over qwen_ops: ``reshape_and_cache`` + ``mixed_attention``.

Registered for ``AttentionBackendEnum.CPU_ATTN``: on the CPU platform vLLM
always picks that backend, whatever else is asked for. The backend keeps the
CPU backend's cache layout (``KVCacheLayout.LBHNC``: per layer
``[blocks, Hkv, Bs, 2*D]``, each head's block holding its Bs keys, then its
Bs values) and brings its own metadata builder (decode rows first, vLLM's
``query_start_loc`` / ``seq_lens`` / block table / slot mapping), ``forward``
and ``do_kv_cache_update``.

vLLM's per-layer cache is a view into one allocation that all layers share
(a GDN layer's pages sit between this layer's blocks), while the qwen_ops ops
take contiguous ``[NB, Hkv, Bs, D]`` caches. Each call therefore gathers the
blocks its requests use into contiguous caches, renumbers the block table and
slot mapping to them, runs the op, and (after a write) scatters the blocks
back. vLLM's allocation stays the only storage.

INT8 (``kv_cache_dtype="int8"``, see :mod:`.int8_kv`): per-channel symmetric
scales ``[Hkv, D]`` per layer, from ``absmax / 127`` of the keys and values
of the first step that writes the cache (the first prefill), then fixed for
the life of the engine. The project's own engine calibrates the same way
(absmax / 127) on a built-in text instead.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .. import ops
from . import counters
from .int8_kv import INT8_KV_CACHE_DTYPE


@dataclass
class QwenOpsAttentionMetadata:
    """One step's full-attention metadata (vLLM order: decode rows first, then prefill chunks).

    query_start_loc: int32 [N+1]; seq_lens: int32 [N] (tokens after this step);
    block_table: int32 [N, M] kernel-block ids; slot_mapping: int64 [T] (-1 = padding).
    """

    num_actual_tokens: int
    num_decodes: int
    num_decode_tokens: int
    query_start_loc: torch.Tensor
    seq_lens: torch.Tensor
    block_table: torch.Tensor
    slot_mapping: torch.Tensor
    max_seq_len: int


def _split_kv(kv_cache: torch.Tensor) -> torch.Tensor:
    """vLLM's per-layer view [NB, Hkv, Bs, 2*D] -> [NB, Hkv, 2, Bs, D] (keys, then values)."""
    nb, hkv, bs, two_d = kv_cache.shape
    return kv_cache.view(nb, hkv, 2, bs, two_d // 2)


def _compact(blocks: torch.Tensor, num_blocks: int):
    """The distinct block ids (sorted) and a table from vLLM block id to position among them (-1 elsewhere)."""
    used = torch.unique(blocks[blocks >= 0].to(torch.int64))
    lut = torch.full((num_blocks,), -1, dtype=torch.int64, device=blocks.device)
    lut[used] = torch.arange(used.numel(), device=blocks.device)
    return used, lut


def _gather(kv: torch.Tensor, used: torch.Tensor):
    g = kv.index_select(0, used)                                  # [n, Hkv, 2, Bs, D]
    return g[:, :, 0].contiguous(), g[:, :, 1].contiguous()


class _Int8Scales:
    """Per-layer INT8 scales, set from the first keys/values written (see the module docstring)."""

    def __init__(self) -> None:
        self.k_scale: torch.Tensor | None = None
        self.v_scale: torch.Tensor | None = None

    def calibrate(self, key: torch.Tensor, value: torch.Tensor) -> None:
        if self.k_scale is None:
            self.k_scale = ops.kv_scales_from_absmax(key)
            self.v_scale = ops.kv_scales_from_absmax(value)


def _make_backend():
    from vllm.v1.attention.backend import AttentionImpl, AttentionMetadataBuilder, AttentionType
    from vllm.v1.attention.backends.cpu_attn import CPUAttentionBackend
    from vllm.v1.attention.backends.utils import split_decodes_and_prefills

    class QwenOpsAttentionMetadataBuilder(AttentionMetadataBuilder[QwenOpsAttentionMetadata]):
        # Decode rows (one query token) first: mixed_attention's batch layout.
        reorder_batch_threshold = 1

        def __init__(self, kv_cache_spec, layer_names, vllm_config, device) -> None:
            super().__init__(kv_cache_spec, layer_names, vllm_config, device)

        def build(self, common_prefix_len, common_attn_metadata, fast_build: bool = False):
            cm = common_attn_metadata
            nd, _, ndt, _ = split_decodes_and_prefills(cm, decode_threshold=1)
            return QwenOpsAttentionMetadata(
                num_actual_tokens=cm.num_actual_tokens, num_decodes=nd, num_decode_tokens=ndt,
                query_start_loc=cm.query_start_loc.to(torch.int32), seq_lens=cm.seq_lens.to(torch.int32),
                block_table=cm.block_table_tensor[: cm.num_reqs].to(torch.int32),
                slot_mapping=cm.slot_mapping[: cm.num_actual_tokens].to(torch.int64),
                max_seq_len=cm.max_seq_len)

    class QwenOpsAttentionImpl(AttentionImpl):
        def __init__(self, num_heads: int, head_size: int, scale: float, num_kv_heads: int,
                     alibi_slopes=None, sliding_window=None, kv_cache_dtype: str = "auto",
                     logits_soft_cap=None, attn_type: str = AttentionType.DECODER,
                     kv_sharing_target_layer_name=None, sinks=None) -> None:
            unsupported = {"alibi_slopes": alibi_slopes, "sliding_window": sliding_window,
                           "logits_soft_cap": logits_soft_cap or None, "sinks": sinks,
                           "kv_sharing_target_layer_name": kv_sharing_target_layer_name}
            bad = [name for name, v in unsupported.items() if v is not None]
            if attn_type != AttentionType.DECODER:
                bad.append(f"attn_type={attn_type}")
            if bad:
                raise NotImplementedError(
                    f"qwen_ops vLLM attention backend: causal decoder attention only; unsupported here: {bad} "
                    "(set QWEN_OPS_VLLM_PLUGIN=0 for vLLM's own backend)")
            self.num_heads, self.head_size, self.num_kv_heads = num_heads, head_size, num_kv_heads
            self.scale = float(scale)
            self.kv_cache_dtype = kv_cache_dtype
            self.int8 = kv_cache_dtype == INT8_KV_CACHE_DTYPE
            self.scales = _Int8Scales() if self.int8 else None
            self.layer_name = "?"

        def _scales(self):
            return (self.scales.k_scale, self.scales.v_scale) if self.int8 else (None, None)

        def do_kv_cache_update(self, layer, key: torch.Tensor, value: torch.Tensor, kv_cache: torch.Tensor,
                               slot_mapping: torch.Tensor) -> None:
            t = slot_mapping.shape[0]
            if t == 0:
                return
            key, value = key[:t], value[:t]
            if self.int8:
                self.scales.calibrate(key, value)
            kv = _split_kv(kv_cache)
            bs = kv.shape[3]
            slots = slot_mapping.to(torch.int64)
            used, lut = _compact(torch.where(slots >= 0, slots // bs, -1), kv.shape[0])
            key_cache, value_cache = _gather(kv, used)
            local = torch.where(slots >= 0, lut[(slots // bs).clamp_min(0)] * bs + slots % bs, -1)
            k_scale, v_scale = self._scales()
            ops.reshape_and_cache(key.contiguous(), value.contiguous(), key_cache, value_cache, local,
                                  k_scale, v_scale)
            kv.index_copy_(0, used, torch.stack((key_cache, value_cache), dim=2))
            counters.record(getattr(layer, "layer_name", self.layer_name),
                            f"reshape_and_cache {key_cache.dtype}".replace("torch.", ""))

        def forward(self, layer, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                    kv_cache: torch.Tensor, attn_metadata: QwenOpsAttentionMetadata | None, output: torch.Tensor,
                    output_scale=None, output_block_scale=None) -> torch.Tensor:
            if output_scale is not None or output_block_scale is not None:
                raise NotImplementedError("qwen_ops vLLM attention backend: fused output quantization")
            if attn_metadata is None:  # vLLM's profiling run
                return output
            md = attn_metadata
            t = md.num_actual_tokens
            kv = _split_kv(kv_cache)
            bs = kv.shape[3]
            # Only the block-table columns the longest request reaches.
            table = md.block_table[:, : (md.max_seq_len + bs - 1) // bs]
            used, lut = _compact(table, kv.shape[0])
            key_cache, value_cache = _gather(kv, used)
            local_table = torch.where(table >= 0, lut[table.clamp_min(0).to(torch.int64)], 0).to(torch.int32)
            k_scale, v_scale = self._scales()
            out = ops.mixed_attention(query[:t].contiguous(), key[:t].contiguous(), value[:t].contiguous(),
                                      key_cache, value_cache, local_table, md.query_start_loc, md.seq_lens,
                                      md.num_decodes, scale=self.scale, k_scale=k_scale, v_scale=v_scale)
            output[:t] = out.reshape(output[:t].shape).to(output.dtype)
            name = getattr(layer, "layer_name", self.layer_name)
            counters.record(name, "mixed_attention")
            counters.record(name, f"heads q={query.shape[1]} kv={key.shape[1]}")
            return output

    class QwenOpsAttentionBackend(CPUAttentionBackend):
        """CPU_ATTN's cache layout and name, qwen_ops' kernels, and kv_cache_dtype 'int8'."""

        forward_includes_kv_cache_update = False
        supported_dtypes = [torch.float16, torch.bfloat16, torch.float32]
        supported_kv_cache_dtypes = ["auto", "bfloat16", "float16", INT8_KV_CACHE_DTYPE]

        @classmethod
        def supports_kv_cache_dtype(cls, kv_cache_dtype) -> bool:
            return kv_cache_dtype in (None, *cls.supported_kv_cache_dtypes)

        @classmethod
        def get_supported_head_sizes(cls) -> list[int]:
            return []  # any head size: the qwen_ops ops take any D

        @staticmethod
        def get_impl_cls():
            return QwenOpsAttentionImpl

        @staticmethod
        def get_builder_cls():
            return QwenOpsAttentionMetadataBuilder

    return QwenOpsAttentionBackend, QwenOpsAttentionImpl, QwenOpsAttentionMetadataBuilder


_classes = None


def backend_classes():
    """(QwenOpsAttentionBackend, QwenOpsAttentionImpl, QwenOpsAttentionMetadataBuilder), built once on first use."""
    global _classes
    if _classes is None:
        _classes = _make_backend()
    return _classes


def __getattr__(name):
    # vLLM imports the backend class by path (qwen_ops.vllm_plugin.attention_backend.QwenOpsAttentionBackend).
    names = ("QwenOpsAttentionBackend", "QwenOpsAttentionImpl", "QwenOpsAttentionMetadataBuilder")
    if name in names:
        return backend_classes()[names.index(name)]
    raise AttributeError(name)


BACKEND_PATH = f"{__name__}.QwenOpsAttentionBackend"


def register_attention_backend() -> None:
    from vllm.v1.attention.backends.registry import AttentionBackendEnum, register_backend

    register_backend(AttentionBackendEnum.CPU_ATTN, BACKEND_PATH)
