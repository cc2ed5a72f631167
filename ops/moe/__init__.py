"""Mixture-of-experts expert computation: tokens grouped by expert, one grouped GEMM per projection."""
from .op import fused_experts  # noqa: F401
