"""Named layer shapes the benchmarks and the device check time, one table for all of them.

``"qwen3.5"`` is the layout of Qwen3.5's layers (transformers'
``Qwen3_5TextConfig`` defaults; ``tests/test_case_registry.py`` keeps the two
equal): full attention with 16 query heads and 4 KV heads of 256, paged in
blocks of 128; Gated DeltaNet with 16 key heads and 32 value heads of 128;
its short convolution over the concatenated q, k, v projections
(2 * 16 * 128 + 32 * 128 = 8192 channels), kernel width 4.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class LayerShapes:
    """Head counts and dims of one model's attention, GDN and conv layers."""

    hq: int  # attention query heads
    hkv: int  # attention KV heads
    head_dim: int
    block_size: int  # paged KV cache block
    hk: int  # GDN key heads
    hv: int  # GDN value heads
    dk: int
    dv: int
    conv_width: int

    @property
    def attention(self) -> dict:
        return dict(hq=self.hq, hkv=self.hkv, d=self.head_dim)

    @property
    def gdn(self) -> dict:
        return dict(hk=self.hk, hv=self.hv, dk=self.dk, dv=self.dv)

    @property
    def conv_channels(self) -> int:
        """Channels of the GDN conv: q and k (Hk * Dk each) and v (Hv * Dv)."""
        return 2 * self.hk * self.dk + self.hv * self.dv


SHAPES = {
    "qwen3.5": LayerShapes(hq=16, hkv=4, head_dim=256, block_size=128, hk=16, hv=32, dk=128, dv=128, conv_width=4),
    # Qwen3.5-0.8B's published config (bench/e2e/bench_vs_transformers.py writes a checkpoint of it): 8 query and
    # 2 KV heads of 256, GDN 16 key and 16 value heads of 128 (conv 6144 channels), in the engine's default KV
    # block of 16 tokens. What bench/ops_floor.py times.
    "qwen3.5-0.8b": LayerShapes(hq=8, hkv=2, head_dim=256, block_size=16, hk=16, hv=16, dk=128, dv=128,
                                conv_width=4),
}
